"""PPO clipped surrogate loss (Schulman et al., arXiv:1707.06347), with the asymmetric
clip of DAPO (arXiv:2503.14476) and the dual clip of Ye et al. (arXiv:1912.09729).

With ratio rho_t = exp(logprobs - old_logprobs) and advantage A_t:

    l_t = max(-A_t * rho_t, -A_t * clip(rho_t, 1 - clip_range_low, 1 + clip_range_high))
    if A_t < 0 and clip_ratio_c is set:  l_t = min(l_t, -A_t * clip_ratio_c)

The dual clip bounds the loss of a token whose ratio has exploded although its
advantage is negative. l is reduced with ``loss_agg_mode``. The log-ratio is clamped to
[-20, 20] before exponentiating so one stale token cannot overflow the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss, check_loss_agg_mode
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import masked_mean

LOG_RATIO_CLAMP = 20.0


@dataclass
class ClipArgs:
    """The clipping arguments shared by the PPO-style losses."""

    clip_range: float = 0.2  # default for both sides
    clip_range_low: float | None = None  # epsilon below 1; None -> clip_range
    clip_range_high: float | None = None  # epsilon above 1; None -> clip_range
    clip_ratio_c: float | None = 3.0  # dual-clip bound for A < 0; None disables it
    loss_agg_mode: str = "token-mean"

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)
        if self.clip_range_low is None:
            self.clip_range_low = self.clip_range
        if self.clip_range_high is None:
            self.clip_range_high = self.clip_range
        if self.clip_range_low < 0 or self.clip_range_high < 0:
            raise ValueError("clip ranges must be >= 0")
        if self.clip_ratio_c is not None and self.clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 (or null), got {self.clip_ratio_c}")


def clipped_pg_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    args: ClipArgs,
    normalizer: LossNormalizer | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The PPO loss of the module docstring; returns (loss, metrics)."""
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - args.clip_range_low, 1.0 + args.clip_range_high)
    losses = torch.maximum(unclipped, clipped)
    lower_clipped = torch.zeros_like(losses, dtype=torch.bool)
    if args.clip_ratio_c is not None:
        bound = -advantages * args.clip_ratio_c
        lower_clipped = (advantages < 0) & (losses > bound)
        losses = torch.where(lower_clipped, bound, losses)
    loss = aggregate_loss(losses, action_mask, args.loss_agg_mode, normalizer)
    with torch.no_grad():
        metrics = {
            "pg_loss": loss.item(),
            "pg_clipfrac": masked_mean((clipped > unclipped).float(), action_mask).item(),
            "pg_clipfrac_lower": masked_mean(lower_clipped.float(), action_mask).item(),
            "ppo_kl": masked_mean(-log_ratio, action_mask).item(),
        }
    return loss, metrics


@POLICY_LOSS_FN.register("ppo")
class PPOPolicyLoss(PolicyLoss):
    """Clipped surrogate objective on rollout tokens."""

    Args = ClipArgs
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
    ) -> tuple[torch.Tensor, dict[str, float]]:
        self.require(old_logprobs=old_logprobs, advantages=advantages)
        return clipped_pg_loss(
            logprobs, old_logprobs, advantages, action_mask, self.args, normalizer
        )
