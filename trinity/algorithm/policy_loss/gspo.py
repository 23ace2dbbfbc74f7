"""GSPO: group sequence policy optimisation, token form (Zheng et al., arXiv:2507.18071).

The importance ratio is taken per sequence, as the geometric mean of the token ratios:

    s_i   = exp( mean_{valid t} (logprobs - old_logprobs) )
    s_i,t = sg[s_i] * pi_theta(y_t) / sg[pi_theta(y_t)]     (value s_i, gradient of token t)
    l_t   = max(-A_t * s_i,t, -A_t * clip(s_i,t, 1 - clip_range_low, 1 + clip_range_high))

so a sequence is clipped as a whole. The paper's ranges are tiny (3e-4 / 4e-4) because
s_i is a per-token average, and its aggregation is ``seq-mean-token-mean``. The mean
log-ratio is clamped to at most 10 before exponentiating.
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import masked_mean
from trinity.config.part_args.policy_loss import GSPOPolicyLossArgs

SEQ_LOG_RATIO_MAX = 10.0


@POLICY_LOSS_FN.register("gspo")
class GSPOPolicyLoss(PolicyLoss):
    """Clipped surrogate with a sequence-level importance ratio."""

    Args = GSPOPolicyLossArgs

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
        log_ratio = logprobs - old_logprobs
        seq_log_ratio = masked_mean(log_ratio, action_mask, dim=-1)  # (B,)
        token_log_ratio = seq_log_ratio.detach()[:, None] + logprobs - logprobs.detach()
        ratio = torch.exp(token_log_ratio.clamp(max=SEQ_LOG_RATIO_MAX))
        unclipped = -advantages * ratio
        clipped = -advantages * ratio.clamp(
            1.0 - self.args.clip_range_low, 1.0 + self.args.clip_range_high
        )
        losses = torch.maximum(unclipped, clipped)
        loss = aggregate_loss(losses, action_mask, self.args.loss_agg_mode, normalizer)
        with torch.no_grad():
            metrics = {
                "pg_loss": loss.item(),
                "pg_clipfrac": masked_mean((clipped > unclipped).float(), action_mask).item(),
                "ppo_kl": masked_mean(-log_ratio, action_mask).item(),
            }
        return loss, metrics
