"""SAPO: soft adaptive policy optimisation (Gao et al., arXiv:2511.20347).

PPO's hard clip is replaced by a smooth gate of the ratio rho_t = exp(logprobs -
old_logprobs), with a temperature that depends on the sign of the advantage:

    tau_t = tau_pos if A_t > 0 else tau_neg
    f_t   = sigmoid(tau_t * (rho_t - 1)) * 4 / tau_t
    l_t   = -A_t * f_t

reduced with ``loss_agg_mode``. The gradient is -A_t * w_t * grad log pi with
w_t = 4 sigmoid(x)(1 - sigmoid(x)) * rho_t, x = tau_t (rho_t - 1): 1 on-policy (like PPO
there), fading smoothly as the ratio drifts either way, faster for larger tau. The paper
sets tau_neg > tau_pos (1.05 and 1.0) because negative updates spread probability over
many unsampled tokens and destabilise training sooner.

Trinity-RFT v0.6 instead weights grad log pi by the gate value f_t itself (a
stop-gradient gate), whose weight is 2 / tau on-policy and does not fade for A_t > 0 as
rho_t grows; this module follows the paper's objective. The log-ratio is clamped to
[-20, 20] before exponentiating.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss, check_loss_agg_mode
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.policy_loss.ppo import LOG_RATIO_CLAMP
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import masked_mean


@POLICY_LOSS_FN.register("sapo")
class SAPOPolicyLoss(PolicyLoss):
    """Soft-gated surrogate with asymmetric temperatures."""

    @dataclass
    class Args:
        tau_pos: float = 1.0  # gate temperature for A > 0
        tau_neg: float = 1.05  # gate temperature for A <= 0; >= tau_pos
        loss_agg_mode: str = "token-mean"

        def __post_init__(self) -> None:
            check_loss_agg_mode(self.loss_agg_mode)
            if self.tau_pos <= 0:
                raise ValueError(f"tau_pos must be > 0, got {self.tau_pos}")
            if self.tau_neg < self.tau_pos:
                raise ValueError(
                    f"tau_neg must be >= tau_pos, got tau_neg {self.tau_neg} < {self.tau_pos}"
                )

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
        log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        ratio = torch.exp(log_ratio)
        tau = torch.where(
            advantages > 0,
            torch.full_like(ratio, self.args.tau_pos),
            torch.full_like(ratio, self.args.tau_neg),
        )
        gate = torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
        loss = aggregate_loss(-advantages * gate, action_mask, self.args.loss_agg_mode, normalizer)
        with torch.no_grad():
            metrics = {
                "pg_loss": loss.item(),
                "sapo_gate": masked_mean(gate, action_mask).item(),
                "ppo_kl": masked_mean(-log_ratio, action_mask).item(),
            }
        return loss, metrics
