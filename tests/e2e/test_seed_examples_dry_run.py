"""Every complete YAML example of the user docs passes ``trinity run --dry-run``, or
fails it in one line naming what this project cannot run.

The examples (restored under tests/unit/config/examples/) read their model and data
paths from environment variables, as the docs allow; here those point into tmp dirs,
whose data directories exist (``--dry-run`` checks every dataset path).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# verl_trainer_config.yaml is not a config of its own: it is the trainer_config_path
# file that verl_trainer_config_path.yaml points to
EXAMPLES = sorted(
    p
    for p in (REPO / "tests" / "unit" / "config" / "examples").glob("*.yaml")
    if p.name != "verl_trainer_config.yaml"
)

# what the run would fail on: a task operator we do not have, a placeholder path
FAILS_WITH = {
    "config_guide": "data_processor.task_pipeline.operators[0].name: unknown task operator",
    "gsm8k_sft_warmup": "buffer.trainer_input.experience_buffer.path: no such file or directory",
}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_passes_dry_run(example: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "MODEL_PATH": str(tmp_path / "models" / "policy"),
        "TRINITY_MODEL_PATH": str(tmp_path / "models" / "policy"),
        "TRINITY_TASKSET_PATH": str(tmp_path / "data" / "gsm8k"),
        "TRINITY_SFT_DATASET_PATH": str(tmp_path / "data" / "sft"),
        "TRINITY_DATASET_PATH": str(tmp_path / "data" / "sft_warmup"),
        "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "checkpoints"),
    }
    for data in ("data/gsm8k", "data/sft", "data/sft_warmup", "home/data/gsm8k", "home/data/math"):
        (tmp_path / data).mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, "-m", "trinity", "run", "--config", str(example), "--dry-run"],
        cwd=example.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if example.stem in FAILS_WITH:
        assert result.returncode == 2, result.stdout
        [line] = result.stderr.splitlines()
        assert line.startswith(f"trinity: config error: {FAILS_WITH[example.stem]}"), line
        return
    assert result.returncode == 0, result.stderr
    assert "# Batch arithmetic" in result.stdout
    assert "experiences per train step" in result.stdout
    assert "checkpoint_root_dir:" in result.stdout
