"""The critic: the clipped value loss by hand, and a PPO trainer whose value loss falls."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_testing import changed, make_config, parameters, rollouts

from trinity.algorithm.loss_agg import LossNormalizer
from trinity.trainer.critic import value_loss
from trinity.trainer.trainer import Trainer


def test_value_loss_by_hand() -> None:
    values = torch.tensor([[1.0, 0.5, 2.0]])
    old = torch.tensor([[0.5, 0.5, 0.5]])
    returns = torch.tensor([[1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, metrics = value_loss(values, old, returns, mask, cliprange_value=0.2)
    # v_clip = 0.5 + clip(v - 0.5, -0.2, 0.2) = [0.7, 0.5, 0.7]
    # (v - G)^2 = [0, 0.25, 1]; (v_clip - G)^2 = [0.09, 0.25, 0.09]
    # 0.5 * max = [0.045, 0.125, 0.5]; token-mean over the two valid tokens = 0.085
    assert loss.item() == pytest.approx(0.085)
    # the clipped term is larger on token 0 only: 1 of 2 valid tokens
    assert metrics["vf_clipfrac"] == pytest.approx(0.5)


def test_value_loss_gradient_stops_at_the_clip() -> None:
    values = torch.tensor([[2.0, 0.6]], requires_grad=True)
    old = torch.tensor([[0.5, 0.5]])
    returns = torch.tensor([[0.0, 0.0]])
    loss, _ = value_loss(values, old, returns, torch.ones(1, 2), cliprange_value=0.2)
    loss.backward()
    # token 0: (2 - 0)^2 = 4 > (0.7 - 0)^2, the unclipped term wins: d/dv 0.5 * v^2 / 2 = v / 2 = 1
    # token 1: v = 0.6 is inside the clip, both terms equal 0.36: gradient 0.6 / 2 = 0.3
    assert values.grad[0].tolist() == pytest.approx([1.0, 0.3])


def test_value_loss_micro_batches_add_up() -> None:
    gen = torch.Generator().manual_seed(1)
    values, old, returns = (torch.randn(4, 3, generator=gen) for _ in range(3))
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]], dtype=torch.float32)
    whole, _ = value_loss(values, old, returns, mask, 0.5)
    norm = LossNormalizer.from_mask(mask)
    parts = [
        value_loss(
            values[i : i + 2], old[i : i + 2], returns[i : i + 2], mask[i : i + 2], 0.5, norm
        )[0]
        for i in (0, 2)
    ]
    assert (parts[0] + parts[1]).item() == pytest.approx(whole.item())


def test_ppo_critic_value_loss_falls(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "ppo",
        algorithm={"advantage_fn_args": {"gamma": 1.0, "lam": 0.95}},
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=6)
    assert trainer.critic is not None and trainer.ref_model is not None
    batch = rollouts(8)
    # the zero-initialised head predicts 0 for every state at first
    first, _ = trainer.prepare(batch)
    assert torch.count_nonzero(first.values) == 0
    actor_before = parameters(trainer.model)
    losses = [trainer.train_step(batch)["critic/vf_loss"] for _ in range(6)]
    # the rewards are fixed, so the returns are fixed targets the critic learns to fit
    assert all(later < earlier for earlier, later in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < 0.8 * losses[0], losses
    assert changed(actor_before, trainer.model)


def test_critic_warmup_trains_only_the_critic(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "ppo",
        trainer={"trainer_config": {"trainer": {"critic_warmup": 1}}},
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    actor_before = parameters(trainer.model)
    critic_before = parameters(trainer.critic.model)
    metrics = trainer.train_step(rollouts(8))
    assert "actor/pg_loss" not in metrics and "critic/vf_loss" in metrics
    assert not changed(actor_before, trainer.model)
    assert changed(critic_before, trainer.critic.model)
    metrics = trainer.train_step(rollouts(8))  # step 2: past the warm-up
    assert "actor/pg_loss" in metrics
    assert changed(actor_before, trainer.model)


def test_critic_checkpoint_round_trip(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = make_config(tiny_model_dir, tmp_path, "ppo")
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    trainer.train_step(rollouts(8))
    trainer.save_checkpoint(tmp_path / "job", 1)
    assert (tmp_path / "job/global_step_1/critic/model_world_size_1_rank_0.pt").exists()
    assert (tmp_path / "job/global_step_1/critic/optim_world_size_1_rank_0.pt").exists()
    saved = parameters(trainer.critic.model)

    restored = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    assert restored.load_checkpoint(tmp_path / "job") == 1
    assert not changed(saved, restored.critic.model)
