"""The FAQ's batch keys: ``actor.ppo_mini_batch_size`` is accepted and overridden by
``buffer.train_batch_size``; ``trainer.ppo_max_token_len_per_gpu`` (the OOM advice) is
the token budget of a packed micro-batch."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_testing import make_config, rollouts

from trinity.config import ConfigError, config_from_dict
from trinity.config.no_effect import set_without_effect
from trinity.trainer.trainer import Trainer

MINI = "trainer.trainer_config.actor_rollout_ref.actor.ppo_mini_batch_size"


def test_ppo_mini_batch_size_is_the_train_batch_size(tiny_model_dir: Path, tmp_path: Path) -> None:
    verl = {"trainer_config": {"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 3}}}}
    cfg = make_config(tiny_model_dir, tmp_path, trainer=verl)
    # 2 tasks x 4 rollouts
    assert cfg.buffer.train_batch_size == 8
    assert cfg.trainer.trainer_config.actor_rollout_ref.actor.ppo_mini_batch_size == 8
    # the value written is reported as overridden at run start and --dry-run
    raw = config_from_dict({"trainer": verl})
    [(key, why)] = set_without_effect(raw)
    assert key == MINI and "overridden by buffer.train_batch_size" in why
    # one optimizer step for the batch of 8, not one per 3 experiences
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    trainer.train_step(rollouts(8))
    states = list(trainer.optimizer.state_dict()["state"].values())
    assert states and all(int(state["step"]) == 1 for state in states)


def test_the_faqs_token_budget_packs_the_trainers_micro_batches(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        trainer={"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 1234},
    )
    actor = cfg.trainer.trainer_config.actor_rollout_ref.actor
    assert actor.ppo_max_token_len_per_gpu == 1234
    assert cfg.trainer.max_token_len_per_gpu == 1234
    assert Trainer(cfg, model_dir=tiny_model_dir, total_steps=1).max_tokens == 1234


def test_the_two_names_of_the_budget_must_agree(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        make_config(
            tiny_model_dir,
            tmp_path,
            trainer={"max_token_len_per_gpu": 1000, "ppo_max_token_len_per_gpu": 1234},
        )
    assert err.value.path == "trainer.ppo_max_token_len_per_gpu"
