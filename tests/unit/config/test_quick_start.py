"""The quick start's config (examples/grpo_gsm8k/gsm8k.yaml) on a local copy of GSM8K.

The copy has the layout of ``huggingface-cli download openai/gsm8k --repo-type dataset``:
a README.md whose ``configs`` name the parquet shards of the subsets ``main`` and
``socratic``. A few rows stand for the 7473 + 1319 of the real dataset.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trinity.config import load_config
from trinity.explorer.explorer import make_taskset_mix, make_taskset_reader

REPO = Path(__file__).resolve().parents[3]
QUICK_START = REPO / "examples" / "grpo_gsm8k" / "gsm8k.yaml"
CARD = """---
dataset_info:
- config_name: main
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
- config_name: socratic
  data_files:
  - split: train
    path: socratic/train-*
  - split: test
    path: socratic/test-*
---
# GSM8K (a few rows)
"""


def rows(subset: str, split: str, n: int) -> list[dict[str, str]]:
    return [
        {
            "question": f"{subset} {split} {i}: what is {i} + 1?",
            "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}",
        }
        for i in range(n)
    ]


def write_gsm8k_copy(root: Path) -> Path:
    for subset in ("main", "socratic"):
        (root / subset).mkdir(parents=True)
        for split, n in (("train", 3), ("test", 2)):
            table = pa.Table.from_pylist(rows(subset, split, n))
            pq.write_table(table, root / subset / f"{split}-00000-of-00001.parquet")
    (root / "README.md").write_text(CARD, encoding="utf-8")
    return root


@pytest.fixture
def quick_start_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {
        "TRINITY_TASKSET_PATH": str(write_gsm8k_copy(tmp_path / "gsm8k")),
        "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "checkpoints"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def test_quick_start_validates_at_dry_run(quick_start_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trinity", "run", "--config", str(QUICK_START), "--dry-run"],
        cwd=REPO,
        env={**os.environ, **quick_start_env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert quick_start_env["TRINITY_TASKSET_PATH"] in done.stdout


def test_quick_start_reads_subset_main_of_its_splits(quick_start_env: dict[str, str]) -> None:
    cfg = load_config(QUICK_START)
    mix = make_taskset_mix(cfg)
    assert mix is not None
    (train,) = mix.readers
    assert train.rows == rows("main", "train", 3)
    (evalset,) = cfg.buffer.explorer_input.eval_tasksets
    reader = make_taskset_reader(cfg, evalset, batch_size=2, is_eval=True)
    tasks = reader.read_batch()
    assert [t.raw["question"] for t in tasks] == [r["question"] for r in rows("main", "test", 2)]
    assert tasks[0].workflow == "math_workflow"
