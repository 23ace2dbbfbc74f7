"""Eval tasksets run with their own repeat_times and rollout_args; mean/best/worst@k.

The test workflow scores run r of a task with reward r, so with k rollouts per task
mean@k = (0 + ... + k-1) / k, best@k = k - 1 and worst@k = 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from behaviour_workflow import behaviour_config, write_tasks

from trinity.explorer.explorer import Explorer


def test_eval_tasksets_use_their_own_settings(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_tasks(data, "train", ["ok"])
    write_tasks(data, "test", ["ok", "ok"])
    config = behaviour_config(
        tiny_model_dir,
        tmp_path,
        data,
        "explorer.runner_per_model=2",
        # two eval tasksets on the same rows: one with its own k and max_tokens, one with
        # the defaults (k = 1, max_tokens = model.max_response_tokens = 4)
        "buffer.explorer_input.eval_tasksets=["
        f"{{name: first, path: {data}, split: test, repeat_times: 4,"
        " rollout_args: {max_tokens: 2}, format: {prompt_key: question}},"
        f" {{name: other, path: {data}, split: test, format: {{prompt_key: question}}}}]",
    )
    explorer = Explorer(config, model_dir=tiny_model_dir, log_dir=tmp_path / "log")
    try:
        metrics = explorer.evaluate(0)
    finally:
        explorer.close()
    first = "eval/first/reward"
    assert metrics[f"{first}/mean@4"] == pytest.approx(1.5)  # (0 + 1 + 2 + 3) / 4
    assert metrics[f"{first}/best@4"] == 3
    assert metrics[f"{first}/worst@4"] == 0
    assert metrics["eval/first/num_tasks"] == 2
    assert metrics["eval/first/response_length/mean"] <= 2
    assert metrics["eval/other/reward/mean@1"] == 0
    assert metrics["eval/other/reward/best@1"] == 0
    assert metrics["eval/other/num_tasks"] == 2
    assert not any("@4" in k for k in metrics if k.startswith("eval/other/"))
