"""The trainer feeds the newer parts what they read: mix_chord its step, corrected_k3 the
sampling policy's log-probs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from trainer_testing import changed, make_config, parameters, rollouts

from trinity.trainer.trainer import Trainer


def expert_rows(n: int) -> list:
    rows = rollouts(n, group_size=n, seed=1)
    for row in rows:
        row.info["is_expert"] = True
    return rows


def test_mix_chord_follows_its_mu_schedule_in_the_trainer(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "train.jsonl").write_text(json.dumps({"prompt": "1", "response": "2"}))
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "mix",
        algorithm={
            "policy_loss_fn": "mix_chord",
            # mu rises linearly from 0 to 0.5 over 2 steps, then stays
            "policy_loss_fn_args": {"mu_warmup_steps": 2, "mu_peak": 0.5, "mu_valley": 0.5},
            "entropy_loss_fn": "mix",
            "entropy_loss_fn_args": {"entropy_coef": 0.01},
        },
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=3)
    before = parameters(trainer.model)
    mus = []
    for _ in range(3):
        metrics = trainer.train_step(rollouts(8) + expert_rows(2))
        assert all(math.isfinite(v) for v in metrics.values())
        mus.append(metrics["actor/chord_mu"])
    assert mus == pytest.approx([0.0, 0.25, 0.5])
    assert metrics["actor/sft_loss"] > 0 and "actor/entropy_loss" in metrics
    assert changed(before, trainer.model)


def test_corrected_k3_loss_sees_the_old_logprobs(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The rollouts' log-probs (in (-5, 0]) are far above the tiny model's (about -10), so
    pi / pi_old is about e^-7 and the corrected KL nearly vanishes; without the old
    log-probs it would equal k3 exactly."""
    kl_losses = {}
    for name in ("k3", "corrected_k3"):
        cfg = make_config(
            tiny_model_dir,
            tmp_path,
            "grpo",
            algorithm={"kl_loss_fn": name, "kl_loss_fn_args": {"kl_coef": 0.1}},
        )
        trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
        trainer.train_step(rollouts(8))  # the policy moves away from the reference
        kl_losses[name] = trainer.train_step(rollouts(8))["actor/kl_loss"]
    assert kl_losses["k3"] > 0
    assert kl_losses["corrected_k3"] < 0.01 * kl_losses["k3"]
