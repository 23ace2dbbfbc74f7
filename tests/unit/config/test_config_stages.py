"""expand_stages: one resolved config per stage, inheriting what the stage leaves out."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from trinity.config import (
    ConfigError,
    config_from_dict,
    expand_stages,
    load_config,
    read_config,
    resolve,
)

EXAMPLES = Path(__file__).parent / "examples"
NOW = datetime(2024, 5, 6, 7, 8, 9)


def test_sft_warmup_then_grpo(env: dict[str, str]) -> None:
    cfg = load_config(EXAMPLES / "gsm8k_sft_warmup.yaml", now=NOW)
    sft, rft = expand_stages(cfg, now=NOW)

    assert sft.name == "<experiment_name>/sft_warmup"
    assert sft.ray_namespace == "<project_name>/<experiment_name>/sft_warmup"
    assert (sft.mode, sft.algorithm.algorithm_type) == ("train", "sft")
    assert sft.algorithm.policy_loss_fn == "sft" and sft.algorithm.use_reference is False
    assert sft.buffer.train_batch_size == 128
    assert sft.trainer.total_steps == 10  # train mode: buffer.total_steps are train steps
    data = sft.buffer.trainer_input.experience_buffer
    # a differently named buffer inherits nothing from the global queue
    assert (data.name, data.path, data.storage_type) == (
        "sft_warmup_dataset",
        "/PATH/TO/YOUR/SFT/DATASET",
        "file",
    )
    assert sft.synchronizer.sync_method == "checkpoint"
    assert sft.algorithm.optimizer.lr == 1e-5  # inherited from the global algorithm

    assert rft.name == "<experiment_name>/rft"
    assert (rft.mode, rft.algorithm.algorithm_type) == ("both", "grpo")
    assert rft.buffer.train_batch_size == 1024  # 128 tasks x 8 rollouts
    assert rft.buffer.trainer_input.experience_buffer.name == "gsm8k_buffer"
    assert rft.stages == [] and len(cfg.stages) == 2


def test_unresolved_and_resolved_inputs_expand_alike(env: dict[str, str]) -> None:
    raw = read_config(EXAMPLES / "gsm8k_sft_warmup.yaml")
    assert expand_stages(raw, now=NOW) == expand_stages(resolve(raw, now=NOW), now=NOW)


def test_stages_share_the_run_timestamp(minimal: dict[str, Any]) -> None:
    minimal["continue_from_checkpoint"] = False
    minimal["stages"] = [{"stage_name": "one"}, {"stage_name": "two", "buffer": {"batch_size": 3}}]
    one, two = expand_stages(config_from_dict(minimal), now=NOW)
    assert (one.name, two.name) == ("run_20240506070809/one", "run_20240506070809/two")
    # the stage changed batch_size only: the taskset is inherited
    assert two.buffer.batch_size == 3 and two.buffer.train_batch_size == 12  # 3 x 4
    assert two.buffer.explorer_input.taskset.name == "tasks"


def test_without_stages_the_config_itself(minimal: dict[str, Any]) -> None:
    cfg = resolve(config_from_dict(minimal), now=NOW)
    assert expand_stages(cfg, now=NOW) == [cfg]
    assert expand_stages(config_from_dict(minimal), now=NOW) == [cfg]


def test_a_broken_stage_fails_at_load_time(tmp_path: Path, minimal: dict[str, Any]) -> None:
    minimal["stages"] = [{"stage_name": "rl", "algorithm": {"repeat_times": 1}}]
    cfg = config_from_dict(minimal)
    with pytest.raises(ConfigError) as info:
        expand_stages(cfg, now=NOW)
    assert info.value.path == "algorithm.repeat_times"
    assert "in stage 'rl'" in str(info.value)
