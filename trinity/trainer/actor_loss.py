"""The actor's loss on one micro-batch: the policy loss, plus the KL loss against the
reference and the entropy loss when the algorithm uses them.

Every term is normalised by the counts of the whole mini-batch (``normalizer``), so the
micro-batches' losses add up to the mini-batch's whatever the split.
"""

from __future__ import annotations

from typing import Any

import torch

from trinity.algorithm.loss_agg import LossNormalizer
from trinity.trainer.batch import TrainBatch


def actor_loss(
    micro: TrainBatch,
    logprobs: torch.Tensor,
    entropy: torch.Tensor | None,
    normalizer: LossNormalizer,
    expert_normalizer: LossNormalizer | None,
    *,
    policy_loss: Any,
    kl_loss: Any | None,
    entropy_loss: Any | None,
    loss_agg_mode: str,
    global_step: int,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(loss, metrics) of ``micro``: ``logprobs`` and ``entropy`` (B, R) from the policy's
    forward. ``kl_loss``: None when the algorithm has none (or no reference);
    ``entropy_loss``: None when the entropy is a metric only."""
    rl_mask = micro.rl_mask
    # mix picks its rollout and expert rows itself; other losses see rollout rows only
    loss_mask = micro.action_mask if "is_expert" in policy_loss.inputs else rl_mask
    # only to losses that read it (mix_chord), so plugin losses keep the older signature
    step = {"global_step": global_step} if "global_step" in policy_loss.inputs else {}
    if "rollout_is_weights" in policy_loss.inputs:
        step["rollout_is_weights"] = micro.rollout_is_weights
    loss, metrics = policy_loss(
        logprobs,
        loss_mask,
        old_logprobs=micro.old_logprobs,
        advantages=micro.advantages,
        ref_logprobs=micro.ref_logprobs,
        is_expert=micro.is_expert,
        normalizer=normalizer,
        expert_normalizer=expert_normalizer,
        **step,
    )
    if kl_loss is not None:
        kl, kl_metrics = kl_loss.loss(
            logprobs,
            micro.ref_logprobs,
            rl_mask,
            loss_agg_mode,
            normalizer,
            old_logprobs=micro.old_logprobs,
        )
        loss = loss + kl
        metrics.update(kl_metrics)
    if entropy is not None:
        if entropy_loss is not None:
            ent_loss, ent_metrics = entropy_loss(
                entropy, rl_mask, loss_agg_mode=loss_agg_mode, normalizer=normalizer
            )
            loss = loss + ent_loss
            metrics.update(ent_metrics)
        else:
            mask = micro.action_mask
            metrics["entropy"] = float((entropy.detach() * mask).sum() / mask.sum().clamp(min=1))
    return loss, metrics
