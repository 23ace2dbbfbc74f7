"""Rollout correction in the trainer: recomputed old log-probs and truncated importance
weights that reach the policy loss."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from trainer_testing import make_config, rollouts

from trinity.config import ConfigError
from trinity.trainer.trainer import Trainer
from trinity.types import Experience


def correction(**fields) -> dict:
    return {"trainer_config": {"algorithm": {"rollout_correction": fields}}}


def with_logprobs(experiences: list[Experience], logprobs: torch.Tensor) -> list[Experience]:
    """``experiences`` whose rollout log-probs are the rows of ``logprobs`` (B, R)."""
    for i, exp in enumerate(experiences):
        exp.logprobs = logprobs[i, : exp.logprobs.numel()].clone()
    return experiences


def pg_loss(trainer: Trainer, experiences: list[Experience]) -> tuple[float, dict, torch.Tensor]:
    """The policy loss of one pass (no optimizer step), the prepare metrics and advantages."""
    batch, metrics = trainer.prepare(experiences)
    total, _ = trainer.backward(batch)["pg_loss"]
    trainer.optimizer.zero_grad(set_to_none=True)
    return total, metrics, batch


def test_tis_weights_reach_the_loss(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "grpo",
        trainer=correction(rollout_is="token", rollout_is_threshold=2.0, bypass_mode=False),
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    exps = rollouts(8)
    batch, _ = trainer.prepare(exps)
    own = batch.old_logprobs  # the trainer's log-probs, recomputed by prepare
    mask = batch.action_mask

    # the engine agrees with the trainer: every weight is 1
    base, metrics, batch = pg_loss(trainer, with_logprobs(exps, own))
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=1e-5)
    adv = batch.advantages  # GRPO: one advantage per row, the same in every case below
    tokens = float(mask.sum())
    # token-mean of -A * ratio with ratio 1 (old log-probs are the current policy's)
    assert base == pytest.approx(float(-(adv * mask).sum()) / tokens, abs=1e-4)

    # the engine gave rows 0-3 log(1.5) less (w = 1.5) and rows 4-7 log(4) less (w = 4,
    # capped at 2)
    shift = torch.tensor([math.log(1.5)] * 4 + [math.log(4.0)] * 4)[:, None]
    loss, metrics, batch = pg_loss(trainer, with_logprobs(exps, own - shift))
    w = torch.tensor([1.5] * 4 + [2.0] * 4)[:, None]
    n_low, n_high = float(mask[:4].sum()), float(mask[4:].sum())
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(
        (1.5 * n_low + 2.0 * n_high) / tokens, abs=1e-5
    )
    assert metrics["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(n_high / tokens)
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(2.0)
    assert torch.allclose(batch.rollout_is_weights, w * mask, atol=1e-5)
    # the old log-probs stay the trainer's; the rollout's are kept beside them
    assert torch.allclose(batch.old_logprobs, own, atol=1e-5)
    assert torch.allclose(batch.rollout_logprobs, (own - shift) * mask, atol=1e-5)
    expected = float(-(adv * w * mask).sum()) / tokens
    assert loss == pytest.approx(expected, abs=1e-4)
    assert loss != pytest.approx(base, abs=1e-3)


def test_bypass_mode_keeps_the_rollout_logprobs(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = make_config(tiny_model_dir, tmp_path, "grpo")  # bypass_mode true by default
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    exps = rollouts(8)
    batch, metrics = trainer.prepare(exps)
    assert batch.rollout_is_weights is None and batch.rollout_logprobs is None
    assert not any(k.startswith("rollout_corr/") for k in metrics)
    assert torch.equal(batch.old_logprobs[0, : exps[0].logprobs.numel()], exps[0].logprobs)


def test_bypass_old_logprobs_false_recomputes_them(tiny_model_dir: Path, tmp_path: Path) -> None:
    # Trinity-RFT's algorithm key for bypass_mode false: the policy's own log-probs
    cfg = make_config(tiny_model_dir, tmp_path, "grpo", algorithm={"bypass_old_logprobs": False})
    exps = with_logprobs(rollouts(2), torch.full((2, 64), -9.0))
    batch, _ = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1).prepare(exps)
    mask = batch.action_mask.bool()
    assert torch.equal(batch.rollout_logprobs[mask], torch.full((int(mask.sum()),), -9.0))
    assert not torch.allclose(batch.old_logprobs[mask], batch.rollout_logprobs[mask])


def test_rollout_is_in_bypass_mode_is_refused(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"rollout_correction\.rollout_is: needs bypass_mode"):
        make_config(tiny_model_dir, tmp_path, "grpo", trainer=correction(rollout_is="token"))
