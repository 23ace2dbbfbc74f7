"""CISPO: clipped importance-sampling-weight policy optimisation (MiniMax-M1,
arXiv:2506.13585).

PPO drops the gradient of every token whose ratio leaves the clip range; CISPO keeps
every token and clips the importance weight instead, as a constant:

    rho_t = exp(logprobs - old_logprobs)
    w_t   = sg(clip(rho_t, 1 - clip_range_low, 1 + clip_range_high))
    l_t   = -A_t * w_t * m_t * logprobs_t

so the gradient is -A_t * w_t * grad log pi. The paper sets no lower bound (the default
``clip_range_low`` 1.0 clips at 0) and tunes the upper one. With ``enable_mask_clip``,
m_t = 0 drops the tokens PPO would drop (rho_t > 1 + mask_clip_range_high with A_t > 0,
rho_t < 1 - mask_clip_range_low with A_t < 0); otherwise m_t = 1. l is reduced with
``loss_agg_mode``.
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import clamped_log_ratio, masked_mean
from trinity.config.part_args.policy_loss import CISPOPolicyLossArgs


@POLICY_LOSS_FN.register("cispo")
class CISPOPolicyLoss(PolicyLoss):
    """REINFORCE weighted by a clipped, stop-gradient importance ratio."""

    Args = CISPOPolicyLossArgs

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
        args = self.args
        with torch.no_grad():
            log_ratio, ratio = clamped_log_ratio(logprobs, old_logprobs)
            low, high = 1.0 - args.clip_range_low, 1.0 + args.clip_range_high
            weight = ratio.clamp(low, high)
            clipped = (ratio < low) | (ratio > high)
            dropped = torch.zeros_like(ratio, dtype=torch.bool)
            if args.enable_mask_clip:
                dropped = ((ratio > 1.0 + args.mask_clip_range_high) & (advantages > 0)) | (
                    (ratio < 1.0 - args.mask_clip_range_low) & (advantages < 0)
                )
            weight = torch.where(dropped, torch.zeros_like(weight), weight)
        losses = -advantages * weight * logprobs
        loss = aggregate_loss(losses, action_mask, args.loss_agg_mode, normalizer)
        metrics = {
            "pg_loss": loss.item(),
            "pg_clipfrac": masked_mean((clipped & ~dropped).float(), action_mask).item(),
            "cispo_dropfrac": masked_mean(dropped.float(), action_mask).item(),
            "ppo_kl": masked_mean(-log_ratio, action_mask).item(),
        }
        return loss, metrics
