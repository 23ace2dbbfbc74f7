"""``trinity run`` in mode bench on a job dir with two checkpoints: base + 2 metric rows.

The checkpoints are written by the Trainer (step 1: the initial weights, step 2: with a
changed final norm), in the layout a run leaves behind.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from behaviour_workflow import DEMO, REPO, write_tasks

pytestmark = pytest.mark.slow  # two CLI runs


@pytest.fixture(scope="module")
def job(tiny_model_dir: Path, tmp_path_factory) -> tuple[Path, Path]:
    from trinity.config import load_config
    from trinity.trainer.trainer import Trainer

    root = tmp_path_factory.mktemp("bench")
    data = root / "data"
    write_tasks(data, "train", ["ok"] * 2)
    write_tasks(data, "test", ["ok"] * 3)
    config = load_config(
        DEMO, [f"model.model_path={tiny_model_dir}", f"checkpoint_root_dir={root}", "name=run"]
    )
    job_dir = root / "trinity-demo" / "run"
    # fp32 parameters: the checkpoint saves them as edited below (bf16 parameters would
    # leave the saved fp32 masters unchanged)
    trainer = Trainer(config, model_dir=tiny_model_dir, total_steps=2, bf16_weights=False)
    trainer.save_checkpoint(job_dir, 1)
    with torch.no_grad():
        trainer.model.model.norm.weight.mul_(3.0)
    trainer.save_checkpoint(job_dir, 2)
    return root, data


def bench(tiny_model_dir: Path, root: Path, data: Path, *overrides: str):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "trinity",
            "run",
            "--config",
            str(DEMO),
            "mode=bench",
            "name=run",
            "continue_from_checkpoint=false",  # bench still reads the run it names
            f"model.model_path={tiny_model_dir}",
            f"checkpoint_root_dir={root}",
            f"buffer.explorer_input.taskset.path={data}",
            f"buffer.explorer_input.eval_tasksets[0].path={data}",
            "buffer.explorer_input.eval_tasksets[0].repeat_times=2",
            "model.max_response_tokens=4",
            *overrides,
        ],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=600,
    )


def rows(job_dir: Path) -> list[dict]:
    path = job_dir / "monitor" / "run_bench_metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_bench_every_checkpoint(tiny_model_dir: Path, job) -> None:
    root, data = job
    job_dir = root / "trinity-demo" / "run"
    result = bench(tiny_model_dir, root, data)
    assert result.returncode == 0, result.stderr[-4000:]
    logged = rows(job_dir)
    assert [r["step"] for r in logged] == [0, 1, 2]
    for row in logged:
        assert row["eval/arithmetic_eval/num_tasks"] == 3
        for key in ("mean@2", "best@2", "worst@2"):
            assert math.isfinite(row[f"eval/arithmetic_eval/accuracy/{key}"])
    log = (job_dir / "log" / "bench.log").read_text()
    assert "loaded policy version 1" in log and "loaded policy version 2" in log
    assert "bench step 2: eval accuracy" in result.stderr
    # no fresh timestamped run was started beside the benched one
    assert sorted(p.name for p in (root / "trinity-demo").iterdir()) == ["run"]


def test_bench_latest_checkpoint_only(tiny_model_dir: Path, job) -> None:
    root, data = job
    job_dir = root / "trinity-demo" / "run"
    before = len(rows(job_dir)) if (job_dir / "monitor" / "run_bench_metrics.jsonl").exists() else 0
    result = bench(tiny_model_dir, root, data, "explorer.bench_on_latest_checkpoint=true")
    assert result.returncode == 0, result.stderr[-4000:]
    assert [r["step"] for r in rows(job_dir)[before:]] == [2]
