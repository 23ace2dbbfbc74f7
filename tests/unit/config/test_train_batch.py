"""A train batch's rollouts and expert rows, and the synchronous runs whose batch never fills."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from config_testing import minimal_config, resolved_config

from trinity.config import ConfigError
from trinity.config.train_batch import expert_rows, rollouts_read


def config(tmp_path: Path, **buffer: Any) -> dict[str, Any]:
    """GRPO on math_workflow, 1 task x 4 rollouts per explore step."""
    data = minimal_config(tmp_path)
    data["buffer"].update({"batch_size": 1, "default_workflow_type": "math_workflow", **buffer})
    return data


def mix(data: dict[str, Any], ratio: float) -> dict[str, Any]:
    data["algorithm"] = {
        "algorithm_type": "mix",
        "repeat_times": data["algorithm"]["repeat_times"],
        "sample_strategy_args": {"expert_data_ratio": ratio},
    }
    data["buffer"]["trainer_input"]["auxiliary_buffers"] = {"sft_dataset": {"path": "/data/sft"}}
    return data


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        resolved_config(data)
    assert err.value.path == "buffer.train_batch_size"
    return str(err.value)


def test_a_train_batch_larger_than_an_explore_step_is_refused(tmp_path: Path) -> None:
    message = refusal(config(tmp_path, train_batch_size=5))
    assert "\n" not in message
    assert "train step 1 cannot fill" in message
    assert (
        "reads 5 rollouts, an explore step writes 4 (buffer.batch_size 1 x repeat_times 4)"
        in message
    )
    assert "sync_interval 1, sync_offset 0" in message
    assert "max_read_timeout 1800 s" in message
    assert "(given: 5); train_batch_size <= 4" in message
    assert resolved_config(config(tmp_path, train_batch_size=4)).buffer.train_batch_size == 4
    assert resolved_config(config(tmp_path, train_batch_size=3)).buffer.train_batch_size == 3


def test_sync_offset_lets_a_short_run_fill_larger_batches(tmp_path: Path) -> None:
    data = config(tmp_path, train_batch_size=5)
    data["synchronizer"] = {"sync_offset": 3}
    # 4 explore steps write 16 rollouts: 3 train steps of 5, each filled in time
    data["buffer"]["total_steps"] = 4
    assert resolved_config(data).trainer.total_steps == 3
    # the explorer runs 3 steps ahead: 4 (t + 3) rollouts by train step t, 5 t needed
    del data["buffer"]["total_steps"]
    assert "train step 13 cannot fill" in refusal(data)


def test_runs_whose_explorer_does_not_wait_are_not_refused(tmp_path: Path) -> None:
    for style in ("trainer_driven", "explorer_driven", "fully_async"):
        data = config(tmp_path, train_batch_size=5)
        data["synchronizer"] = {"sync_style": style}
        assert resolved_config(data).buffer.train_batch_size == 5
    explore_only = config(tmp_path, train_batch_size=5)
    explore_only["mode"] = "explore"
    assert resolved_config(explore_only).buffer.train_batch_size == 5


def test_workflows_of_unknown_experience_counts_are_not_refused(tmp_path: Path) -> None:
    # one experience per turn: a step may write more than batch_size x repeat_times
    data = config(tmp_path, train_batch_size=5, default_workflow_type="step_wise_env_workflow")
    assert resolved_config(data).buffer.train_batch_size == 5


def test_mix_train_batch_size_counts_the_expert_rows(tmp_path: Path) -> None:
    # Trinity-RFT's mix_vlm: 320 rows, ceil(0.2 x 320) = 64 expert rows, 256 rollouts
    data = config(tmp_path, batch_size=32, train_batch_size=320)
    data["algorithm"]["repeat_times"] = 8
    assert rollouts_read(resolved_config(mix(data, 0.2)), 320) == 256
    # 4 rollouts per explore step and train_batch_size 5: 4 rollouts + 1 expert row
    cfg = resolved_config(mix(config(tmp_path, train_batch_size=5), 0.2))
    assert rollouts_read(cfg, 5) == 4
    # 6 rows: ceil(1.2) = 2 expert rows, 4 rollouts; 7 rows would read 5 rollouts
    assert rollouts_read(resolved_config(mix(config(tmp_path, train_batch_size=6), 0.2)), 6) == 4
    message = refusal(mix(config(tmp_path, train_batch_size=7), 0.2))
    assert "reads 5 rollouts (expert rows, expert_data_ratio 0.2, fill the rest)" in message
    assert "train_batch_size <= 6" in message


def test_mix_default_train_batch_size_reads_one_explore_step(tmp_path: Path) -> None:
    data = mix(config(tmp_path, batch_size=2, total_steps=10), 0.25)
    cfg = resolved_config(data)
    # 8 rollouts per explore step; 11 rows: ceil(0.25 x 11) = 3 expert rows, 8 rollouts
    assert cfg.buffer.train_batch_size == 11
    assert rollouts_read(cfg, 11) == 8
    assert cfg.trainer.total_steps == 10  # one train step per explore step
    data["algorithm"]["sample_strategy_args"] = {"expert_data_ratio": 0.0}
    assert resolved_config(data).buffer.train_batch_size == 8


def test_expert_rows_round_floating_point_noise_away() -> None:
    assert 0.07 * 100 > 7  # 7.000000000000001
    assert expert_rows(100, 0.07) == 7
    assert expert_rows(8, 0.3) == 3  # ceil(2.4)
    assert expert_rows(320, 0.2) == 64


def test_an_expert_data_ratio_of_one_leaves_no_rollouts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"expert_data_ratio must lie in \[0, 1\)"):
        resolved_config(mix(config(tmp_path), 1.0))
