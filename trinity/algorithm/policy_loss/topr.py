"""TOPR: tapered off-policy REINFORCE (Le Roux et al., arXiv:2503.14286).

REINFORCE on off-policy data, where only the updates that push probability *down* are
importance-weighted, and their weight is truncated at 1. With rho_t = exp(logprobs -
old_logprobs):

    alpha_t = 1                     if A_t > advantage_threshold
            = clip(rho_t, 0, 1)     otherwise
    l_t     = -sg(alpha_t) * A_t * logprobs_t

reduced with ``loss_agg_mode``. The paper weighs rewards; any advantage (e.g. GRPO's)
may stand in for them, as a baseline. Positive examples get the plain SFT-like gradient,
negative ones a gradient that fades once the policy has moved away from them.
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import clamped_log_ratio, masked_mean
from trinity.config.part_args.policy_loss import TOPRPolicyLossArgs


@POLICY_LOSS_FN.register("topr")
class TOPRPolicyLoss(PolicyLoss):
    """REINFORCE with truncated importance weights on the non-positive examples."""

    Args = TOPRPolicyLossArgs

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
        with torch.no_grad():
            log_ratio, ratio = clamped_log_ratio(logprobs, old_logprobs)
            positive = advantages > self.args.advantage_threshold
            alpha = torch.where(positive, torch.ones_like(ratio), ratio.clamp(max=1.0))
        losses = -alpha * advantages * logprobs
        loss = aggregate_loss(losses, action_mask, self.args.loss_agg_mode, normalizer)
        metrics = {
            "pg_loss": loss.item(),
            "topr_alpha": masked_mean(alpha, action_mask).item(),
            "ppo_kl": masked_mean(-log_ratio, action_mask).item(),
        }
        return loss, metrics
