"""Gradient accumulation is exact: one batch of 8 = 4 micro-batches of 2, through the Trainer.

Every loss term of a micro-batch is divided by the counts of the whole batch, so the
micro-batch gradients add up to the batch gradient. Checked on the tiny model in float32
with GRPO advantages, a KL loss and an entropy bonus, for each aggregation mode.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_testing import make_config, rollouts

from trinity.trainer.actor import forward_logprobs
from trinity.trainer.trainer import Trainer

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def build(
    model_dir: Path, tmp_path: Path, mode: str, micro: int, *, extra_terms: bool = True
) -> Trainer:
    """A GRPO trainer; ``extra_terms`` adds a KL loss and an entropy bonus to the policy loss."""
    algorithm = {"loss_agg_mode": mode, "kl_loss_fn": "none"}
    if extra_terms:
        algorithm.update(
            kl_loss_fn="k2",
            kl_loss_fn_args={"kl_coef": 0.1},
            entropy_loss_fn_args={"entropy_coef": 0.01},
        )
    cfg = make_config(
        model_dir,
        tmp_path,
        "grpo",
        algorithm=algorithm,
        trainer={
            "trainer_config": {
                "actor_rollout_ref": {
                    "actor": {"ppo_micro_batch_size_per_gpu": micro, "grad_clip": 1.0}
                }
            }
        },
    )
    return Trainer(cfg, model_dir=model_dir, total_steps=1)


def grads(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("mode", MODES)
def test_batch_of_8_equals_4_micro_batches_of_2(
    tiny_model_dir: Path, tmp_path: Path, mode: str
) -> None:
    whole = build(tiny_model_dir, tmp_path, mode, micro=8)
    accumulated = build(tiny_model_dir, tmp_path, mode, micro=2)
    experiences = rollouts(8)

    batch, _ = whole.prepare(experiences)
    whole.backward(batch)
    batch, _ = accumulated.prepare(experiences)
    accumulated.backward(batch)
    g_whole, g_acc = grads(whole), grads(accumulated)
    assert g_whole.keys() == g_acc.keys()
    for name, g in g_whole.items():
        torch.testing.assert_close(g_acc[name], g, rtol=1e-4, atol=1e-7, msg=name)
    whole.optimizer.zero_grad(set_to_none=True)
    accumulated.optimizer.zero_grad(set_to_none=True)

    m_whole = whole.train_step(experiences)
    m_acc = accumulated.train_step(experiences)
    after_whole, after_acc = whole.model.state_dict(), accumulated.model.state_dict()
    worst = max(float((after_whole[k] - after_acc[k]).abs().max()) for k in after_whole)
    assert worst < 1e-5
    # the micro-batch loss shares add up to the batch loss
    assert m_acc["actor/pg_loss"] == pytest.approx(m_whole["actor/pg_loss"], rel=1e-4, abs=1e-6)
    assert m_acc["actor/kl_loss"] == pytest.approx(m_whole["actor/kl_loss"], rel=1e-4, abs=1e-6)


def test_averaging_micro_batch_means_would_differ(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The control: the naive accumulation (mean of each micro-batch's own token-mean)
    gives a different gradient on this batch, so the check above can fail."""
    trainer = build(tiny_model_dir, tmp_path, "token-mean", micro=2, extra_terms=False)
    batch, _ = trainer.prepare(rollouts(8))
    trainer.backward(batch)
    exact = grads(trainer)
    trainer.optimizer.zero_grad(set_to_none=True)
    micro_batches = batch.split(2)
    for micro in micro_batches:
        logprobs, _ = forward_logprobs(trainer.model, micro)
        loss, _ = trainer.policy_loss(
            logprobs,
            micro.action_mask,
            old_logprobs=micro.old_logprobs,
            advantages=micro.advantages,
        )
        (loss / len(micro_batches)).backward()
    naive = grads(trainer)
    flat_exact = torch.cat([g.flatten() for g in exact.values()])
    flat_naive = torch.cat([naive[k].flatten() for k in exact])
    # micro-batches hold different token counts, so their means are weighted wrongly
    assert float((flat_naive - flat_exact).norm() / flat_exact.norm()) > 0.05
