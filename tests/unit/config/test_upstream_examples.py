"""What Trinity-RFT's example configs write that this project reads with their meaning:
an eval taskset named as its training taskset, RAFT with one rollout per task,
``schema_type`` on buffers, and two vLLM / wandb keys reported as without effect.
(benchmarks/upstream_examples_dry_run.py surveys the examples themselves.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from config_testing import minimal_config, resolved_config

from trinity.config import ConfigError, config_from_dict
from trinity.config.no_effect import set_without_effect
from trinity.explorer.best_of_group import keep_best_of_group
from trinity.types import EID, Experience


def test_an_eval_taskset_may_share_its_training_tasksets_name(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["buffer"]["explorer_input"]["eval_tasksets"] = [{"name": "tasks", "path": "/data/t"}]
    cfg = resolved_config(data)
    assert [t.name for t in cfg.buffer.explorer_input.eval_tasksets] == ["tasks"]
    # the experience buffer still may not take a training taskset's name
    data["buffer"]["trainer_input"]["experience_buffer"]["name"] = "tasks"
    with pytest.raises(ConfigError, match=r"experience_buffer\.name: is already used by"):
        resolved_config(data)


def test_raft_runs_with_one_rollout_per_task(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["algorithm"] = {"algorithm_type": "raft", "repeat_times": 1}
    assert resolved_config(data).algorithm.repeat_times == 1
    # a group of one keeps its rollout when it scored above 0 (RAFT's reward filter)
    exps = [
        Experience(
            tokens=torch.tensor([1, 2, 3]),
            prompt_length=1,
            reward=reward,
            eid=EID(batch=0, task=task, run=0),
        )
        for task, reward in enumerate([1.0, 0.0])
    ]
    assert keep_best_of_group(exps) == 1
    assert [bool(e.action_mask.any()) for e in exps] == [True, False]


def test_schema_type_sft_names_what_an_auxiliary_buffer_holds(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["algorithm"] = {"algorithm_type": "mix", "repeat_times": 4}
    aux = {"name": "sft_dataset", "path": "/data/sft", "schema_type": "sft"}
    data["buffer"]["trainer_input"]["auxiliary_buffers"] = {"sft_dataset": aux}
    assert (
        resolved_config(data).buffer.trainer_input.auxiliary_buffers["sft_dataset"].schema_type
        == "sft"
    )
    aux["schema_type"] = "dpo"
    with pytest.raises(ConfigError, match=r"auxiliary_buffers\.sft_dataset\.schema_type: .*SFT"):
        resolved_config(data)


def test_schema_type_of_a_dataset_must_match_the_algorithms_rows(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["mode"] = "train"
    data["algorithm"] = {"algorithm_type": "dpo"}
    data["buffer"]["trainer_input"]["experience_buffer"] = {
        "name": "pairs",
        "path": "/data/pairs",
        "schema_type": "dpo",
    }
    assert resolved_config(data).buffer.trainer_input.experience_buffer.schema_type == "dpo"
    data["buffer"]["trainer_input"]["experience_buffer"]["schema_type"] = "sft"
    with pytest.raises(ConfigError, match="trains on dpo rows"):
        resolved_config(data)


def test_vllm_request_logging_and_wandb_preview_are_reported_without_effect(
    tmp_path: Path,
) -> None:
    data = minimal_config(tmp_path)
    data["explorer"] = {"rollout_model": {"enable_log_requests": True}}
    data["trainer"] = {"enable_preview": False}
    found = dict(set_without_effect(config_from_dict(data)))
    assert "vLLM-only" in found["explorer.rollout_model.enable_log_requests"]
    assert "preview" in found["trainer.enable_preview"]
    data["trainer"] = {"enable_preview": True}  # upstream's default: nothing to report
    assert "trainer.enable_preview" not in dict(set_without_effect(config_from_dict(data)))
