"""examples/reference_loop.py runs the in-process loop on the demo config (the tiny model
in place of SmolLM2) and prints one line per step."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "reference_loop.py"


def test_the_example_runs_a_step_and_prints_its_reward(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    spec = importlib.util.spec_from_file_location("reference_loop", SCRIPT)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.chdir(REPO)  # the config's taskset path is relative to the repository
    results = example.main(
        [
            "--config",
            "examples/arithmetic/grpo.yaml",
            "--steps",
            "1",
            f"model.model_path={tiny_model_dir}",
            f"checkpoint_root_dir={tmp_path}",
            "algorithm.repeat_times=2",
            "model.max_response_tokens=4",
        ]
    )
    assert [r.step for r in results] == [1]
    assert results[0].version == 1 and results[0].train is not None
    reward = results[0].explore["rollout/reward/mean"]
    assert math.isfinite(reward)
    out = capsys.readouterr().out
    assert f"step 1: reward {reward:.3f}" in out, out
    # the runners' logs went to the run's job directory
    assert list(tmp_path.glob("trinity-demo/arithmetic-grpo*/log/*.log")), out
