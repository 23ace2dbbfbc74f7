"""SAPO: soft adaptive policy optimisation (Gao et al., arXiv:2511.20347).

PPO's hard clip is replaced by a smooth gate of the ratio rho_t = exp(logprobs -
old_logprobs), with a temperature that depends on the sign of the advantage:

    tau_t = tau_pos if A_t > 0 else tau_neg
    f_t   = sigmoid(tau_t * (rho_t - 1)) * 4 / tau_t
    l_t   = -A_t * sg(f_t) * logprobs_t

reduced with ``loss_agg_mode``; sg is a stop-gradient. As in Trinity-RFT, the gate
weights the REINFORCE gradient: grad l_t = -A_t * f_t * grad log pi, with weight
f_t = 2 / tau_t on-policy (rho 1), rising towards 4 / tau_t as the ratio grows and
falling towards 0 as it shrinks. The paper sets tau_neg > tau_pos (1.05 and 1.0)
because negative updates spread probability over many unsampled tokens and destabilise
training sooner. The log-ratio is clamped to [-20, 20] before exponentiating.
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import clamped_log_ratio, masked_mean
from trinity.config.part_args.policy_loss import SAPOPolicyLossArgs


@POLICY_LOSS_FN.register("sapo")
class SAPOPolicyLoss(PolicyLoss):
    """Soft-gated surrogate with asymmetric temperatures."""

    Args = SAPOPolicyLossArgs

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
        tau = torch.where(
            advantages > 0,
            torch.full_like(ratio, self.args.tau_pos),
            torch.full_like(ratio, self.args.tau_neg),
        )
        gate = torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
        per_token = -advantages * gate.detach() * logprobs
        loss = aggregate_loss(per_token, action_mask, self.args.loss_agg_mode, normalizer)
        with torch.no_grad():
            metrics = {
                "pg_loss": loss.item(),
                "sapo_gate": masked_mean(gate, action_mask).item(),
                "ppo_kl": masked_mean(-log_ratio, action_mask).item(),
            }
        return loss, metrics
