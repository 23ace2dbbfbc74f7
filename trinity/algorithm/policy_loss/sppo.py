"""sPPO, token form (arXiv:2108.05828, as Trinity-RFT cites it): a log-ratio surrogate
whose tokens outside a symmetric-in-log trust region carry no gradient.

With rho_t = exp(logprobs - old_logprobs) (no gradient through the test):

    in_t = 1   if 1 / (1 + epsilon) <= rho_t <= 1 + epsilon,   else 0
    l_t  = -A_t * (logprobs_t - old_logprobs_t) * in_t

so a token inside the region has the REINFORCE gradient -A_t * grad log pi, whatever
its ratio, and one outside has none. l is reduced with ``loss_agg_mode``.
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import masked_mean
from trinity.config.part_args.policy_loss import SPPOPolicyLossArgs


@POLICY_LOSS_FN.register("sppo")
class SPPOPolicyLoss(PolicyLoss):
    """Advantage times log-ratio, on the tokens whose ratio stays in the trust region."""

    Args = SPPOPolicyLossArgs

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
        with torch.no_grad():
            # compared in log space: no overflow for a stale token
            bound = torch.log1p(torch.tensor(self.args.epsilon, dtype=log_ratio.dtype))
            inside = log_ratio.abs() <= bound
        losses = torch.where(inside, -advantages * log_ratio, torch.zeros_like(log_ratio))
        loss = aggregate_loss(losses, action_mask, self.args.loss_agg_mode, normalizer)
        metrics = {
            "pg_loss": loss.item(),
            "pg_clipfrac": masked_mean((~inside).float(), action_mask).item(),
            "ppo_kl": masked_mean(-log_ratio.detach(), action_mask).item(),
        }
        return loss, metrics
