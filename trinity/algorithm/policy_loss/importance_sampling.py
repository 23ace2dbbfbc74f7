"""Importance-sampled policy gradient, without clipping (Trinity-RFT's loss for
on-policy distillation, where the advantage is the teacher's per-token log-ratio).

With rho_t = exp(logprobs - old_logprobs), the log-ratio clamped to [-20, 20]:

    l_t = -A_t * rho_t

reduced with ``loss_agg_mode``; its gradient is -A_t * rho_t * grad log pi, the
unbiased off-policy policy gradient (PPO's surrogate with no trust region).
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import clamped_log_ratio, masked_mean
from trinity.config.part_args.policy_loss import LossAggModeArgs


@POLICY_LOSS_FN.register("importance_sampling")
class ImportanceSamplingPolicyLoss(PolicyLoss):
    """-A * rho, with no clip."""

    Args = LossAggModeArgs

    inputs = frozenset({"old_logprobs", "advantages"})

    def __call__(
        self,
        logprobs: torch.Tensor,
        action_mask: torch.Tensor,
        *,
        old_logprobs: torch.Tensor | None = None,
        advantages: torch.Tensor | None = None,
        ref_logprobs: torch.Tensor | None = None,
        is_expert: torch.Tensor | None = None,
        normalizer: LossNormalizer | None = None,
        expert_normalizer: LossNormalizer | None = None,
        global_step: int | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        self.require(old_logprobs=old_logprobs, advantages=advantages)
        log_ratio, ratio = clamped_log_ratio(logprobs, old_logprobs)
        loss = aggregate_loss(-advantages * ratio, action_mask, self.args.loss_agg_mode, normalizer)
        with torch.no_grad():
            metrics = {
                "pg_loss": loss.item(),
                "ppo_kl": masked_mean(-log_ratio, action_mask).item(),
            }
        return loss, metrics
