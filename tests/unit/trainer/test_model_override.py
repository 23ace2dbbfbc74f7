"""``model.override_config`` reaches every model the run builds: the trainer's actor and
reference, the rollout engine (which must agree with the trainer) and the critic."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_testing import make_config

from trinity.explorer.engines import RolloutEngines
from trinity.rollout.overrides import apply_override
from trinity.trainer.trainer import Trainer

# the tiny model's rope_theta is 10000 and its attention_dropout 0
OVERRIDE = {"attention_dropout": 0.25, "rope_parameters": {"rope_theta": 500.0}}


def inv_freq(model: torch.nn.Module) -> torch.Tensor:
    (rotary,) = [m for name, m in model.named_modules() if name.endswith("rotary_emb")]
    return rotary.inv_freq


def test_a_nested_override_merges_into_the_dict_it_names() -> None:
    from transformers import LlamaConfig

    config = LlamaConfig()
    apply_override(config, OVERRIDE)
    assert config.rope_parameters == {"rope_theta": 500.0, "rope_type": "default"}
    assert config.attention_dropout == 0.25


def test_trainer_and_engine_build_the_overridden_config(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "ppo",
        algorithm={"kl_loss_fn": "k2", "use_reference": True},
        trainer={
            "trainer_config": {
                "actor_rollout_ref": {"model": {"override_config": OVERRIDE}},
                "critic": {"model": {"override_config": {"attention_dropout": 0.5}}},
            }
        },
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    assert trainer.ref_model is not None and trainer.critic is not None
    engines = RolloutEngines.from_config(cfg, str(tiny_model_dir))
    try:
        engine_model = engines.engines[0].model
        for model in (trainer.model, trainer.ref_model, engine_model):
            assert model.config.attention_dropout == 0.25
            assert model.config.rope_parameters["rope_theta"] == 500.0
        # the rotary embedding was built from the override: theta^(-2i/d), i = 1
        head_dim = 64 // 4
        expected = 500.0 ** (-2 / head_dim)
        assert inv_freq(trainer.model)[1].item() == pytest.approx(expected)
        assert torch.equal(inv_freq(engine_model), inv_freq(trainer.model))
        # the critic has its own override
        assert trainer.critic.model.backbone.config.attention_dropout == 0.5
        assert trainer.critic.model.backbone.config.rope_parameters["rope_theta"] == 10000.0
    finally:
        engines.close()
