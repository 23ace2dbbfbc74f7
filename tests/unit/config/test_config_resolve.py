"""resolve: a pure function that fills every derived value."""

from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from trinity.config import config_from_dict, job_dir, resolve, to_dict, validate
from trinity.config.algorithm_defaults import ALGORITHM_DEFAULTS

NOW = datetime(2024, 5, 6, 7, 8, 9)


def resolved(data: dict[str, Any]):
    cfg = resolve(config_from_dict(data), now=NOW)
    validate(cfg)
    return cfg


def test_input_is_unchanged_and_output_is_new(minimal: dict[str, Any]) -> None:
    cfg = config_from_dict(minimal)
    before = copy.deepcopy(cfg)
    out = resolve(cfg, now=NOW)
    assert cfg == before
    assert out is not cfg and out.buffer is not cfg.buffer
    assert cfg.buffer.train_batch_size is None and out.buffer.train_batch_size == 8


def test_same_now_gives_same_result(minimal: dict[str, Any]) -> None:
    minimal["continue_from_checkpoint"] = False
    cfg = config_from_dict(minimal)
    assert resolve(cfg, now=NOW) == resolve(cfg, now=NOW)
    assert resolve(cfg, now=NOW) != resolve(cfg, now=datetime(2024, 5, 6, 7, 8, 10))


def test_resolving_twice_changes_nothing_more(minimal: dict[str, Any]) -> None:
    once = resolve(config_from_dict(minimal), now=NOW)
    assert resolve(once, now=NOW) == once


def test_fresh_run_is_renamed_with_the_timestamp(minimal: dict[str, Any], tmp_path: Path) -> None:
    minimal["continue_from_checkpoint"] = False
    cfg = resolved(minimal)
    assert cfg.name == "run_20240506070809"
    assert cfg.ray_namespace == "proj/run_20240506070809"
    assert job_dir(cfg) == tmp_path / "ckpt" / "proj" / "run_20240506070809"
    assert not (tmp_path / "ckpt").exists()  # neither resolve nor validate creates anything


def test_continuing_run_keeps_its_name(minimal: dict[str, Any]) -> None:
    cfg = resolved(minimal)
    assert (cfg.name, cfg.ray_namespace) == ("run", "proj/run")
    minimal["ray_namespace"] = "mine"
    assert resolved(minimal).ray_namespace == "mine"


def test_lengths(minimal: dict[str, Any]) -> None:
    # 64 prompt + 32 response tokens
    assert resolved(minimal).model.max_model_len == 96
    minimal["model"] = {"model_path": "m", "max_model_len": 100, "max_response_tokens": 30}
    cfg = resolved(minimal)
    assert cfg.model.max_prompt_tokens == 70  # 100 - 30
    assert cfg.explorer.rollout_model.max_model_len == 100
    assert cfg.explorer.rollout_model.model_path == "m"
    assert cfg.model.critic_model_path == "m"


def test_batch_sizes_and_tasksets(minimal: dict[str, Any]) -> None:
    minimal["model"]["temperature"] = 0.7
    minimal["buffer"]["default_workflow_type"] = "math_workflow"
    minimal["buffer"]["default_reward_fn_type"] = "math_reward"
    ei = minimal["buffer"]["explorer_input"]
    ei["default_eval_workflow_type"] = "eval_workflow"
    ei["taskset"]["rollout_args"] = {"top_p": 0.9}
    ei["tasksets"] = [
        {
            "name": "second",
            "path": "/data/second",
            "default_workflow_type": "own",
            "repeat_times": 2,
        }
    ]
    ei["eval_tasksets"] = [{"name": "eval", "path": "/data/eval"}]
    cfg = resolved(minimal)
    # 2 tasks x 4 rollouts
    assert cfg.buffer.train_batch_size == 8
    first, second = cfg.buffer.explorer_input.tasksets
    assert cfg.buffer.explorer_input.taskset is first
    assert (first.name, second.name) == ("tasks", "second")
    assert (first.repeat_times, second.repeat_times) == (
        4,
        2,
    )  # algorithm's, then the taskset's own
    assert (first.default_workflow_type, second.default_workflow_type) == ("math_workflow", "own")
    assert first.default_reward_fn_type == "math_reward"
    assert (first.rollout_args.temperature, first.rollout_args.top_p) == (0.7, 0.9)
    assert first.rollout_args.max_tokens == 32
    assert first.storage_type == "file" and not first.is_eval
    (evalset,) = cfg.buffer.explorer_input.eval_tasksets
    assert (evalset.repeat_times, evalset.is_eval) == (1, True)
    assert evalset.default_workflow_type == "eval_workflow"
    assert cfg.buffer.trainer_input.experience_buffer.storage_type == "queue"


def test_train_batch_size_given_wins(minimal: dict[str, Any]) -> None:
    minimal["buffer"]["train_batch_size"] = 6
    assert resolved(minimal).buffer.train_batch_size == 6


@pytest.mark.parametrize("algorithm_type", sorted(ALGORITHM_DEFAULTS))
def test_algorithm_defaults_fill_unset_parts(minimal: dict[str, Any], algorithm_type: str) -> None:
    minimal["algorithm"]["algorithm_type"] = algorithm_type
    if algorithm_type in ("mix", "mix_chord"):  # their expert rows
        minimal["buffer"]["trainer_input"]["auxiliary_buffers"] = {
            "sft_dataset": {"path": "/data/sft"}
        }
    if algorithm_type in ("on_policy_distill", "jsd"):  # their teacher
        minimal.setdefault("explorer", {})["auxiliary_models"] = [{"model_path": "teacher"}]
    cfg = resolved(minimal)
    table = ALGORITHM_DEFAULTS[algorithm_type]
    algo = cfg.algorithm
    assert (algo.advantage_fn, algo.policy_loss_fn, algo.kl_loss_fn) == (
        table.advantage_fn,
        table.policy_loss_fn,
        table.kl_loss_fn,
    )
    assert algo.use_critic == table.use_critic
    assert algo.use_reference == (
        table.needs_reference or algo.kl_loss_fn != "none" or algo.kl_penalty_fn != "none"
    )


def test_user_parts_win_and_dpo_uses_two_rollouts(minimal: dict[str, Any]) -> None:
    minimal["algorithm"].update(advantage_fn="opmd", kl_loss_fn="none", use_critic=True)
    cfg = resolved(minimal)
    assert (cfg.algorithm.advantage_fn, cfg.algorithm.policy_loss_fn) == ("opmd", "ppo")
    assert cfg.algorithm.use_reference is False and cfg.algorithm.use_critic is True
    minimal["algorithm"] = {"algorithm_type": "dpo", "repeat_times": 1}
    minimal["mode"] = "train"
    minimal["buffer"]["trainer_input"]["experience_buffer"]["path"] = "/data/pairs"
    cfg = resolved(minimal)
    assert cfg.algorithm.repeat_times == 2 and cfg.algorithm.use_reference is True
    # in train mode the experience buffer is a dataset read from files
    assert cfg.buffer.trainer_input.experience_buffer.storage_type == "file"
    assert cfg.synchronizer.sync_method == "checkpoint"


def test_trainer_short_forms_and_optimizer_reach_the_verl_layout(minimal: dict[str, Any]) -> None:
    minimal["algorithm"]["optimizer"] = {"lr": "2e-6", "warmup_style": "cosine"}
    minimal["trainer"] = {
        "grad_clip": 0.5,
        "use_dynamic_bsz": True,
        "trainer_config": {
            "actor_rollout_ref": {"actor": {"ppo_max_token_len_per_gpu": 4096, "ppo_epochs": 2}}
        },
    }
    cfg = resolved(minimal)
    actor = cfg.trainer.trainer_config.actor_rollout_ref.actor
    assert (actor.grad_clip, actor.use_dynamic_bsz) == (0.5, True)  # short forms override
    assert cfg.trainer.max_token_len_per_gpu == 4096  # unset short form shows the layout's value
    assert actor.optim.lr == 2e-6 and actor.optim.warmup_style == "cosine"
    critic = cfg.trainer.trainer_config.critic
    assert critic.ppo_max_token_len_per_gpu == 8192  # twice the actor's
    assert critic.ppo_epochs == 2
    ref = cfg.trainer.trainer_config.actor_rollout_ref.ref
    assert ref.log_prob_micro_batch_size_per_gpu == actor.ppo_micro_batch_size_per_gpu


def test_total_steps_follow_buffer_total_steps(minimal: dict[str, Any]) -> None:
    minimal["buffer"]["total_steps"] = 10
    minimal["buffer"]["train_batch_size"] = 4
    cfg = resolved(minimal)
    # 10 explore steps x 2 tasks x 4 rollouts = 80 experiences; 80 / 4 per train step = 20
    assert cfg.trainer.total_steps == 20
    assert cfg.algorithm.optimizer.total_training_steps == 20
    assert cfg.trainer.trainer_config.critic.optim.total_training_steps == 20
    minimal["buffer"].pop("total_steps")
    cfg = resolved(minimal)
    assert cfg.trainer.total_steps is None and cfg.algorithm.optimizer.total_training_steps == -1


def test_round_trip_through_plain_data(minimal: dict[str, Any]) -> None:
    cfg = resolved(minimal)
    assert config_from_dict(to_dict(cfg)) == cfg
