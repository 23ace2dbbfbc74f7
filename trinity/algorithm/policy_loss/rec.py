"""REC: the REINFORCE-with-clipping family of Yao et al., *Group-Relative REINFORCE Is
Secretly an Off-Policy Algorithm* (arXiv:2509.24203).

A REINFORCE loss whose tokens may be dropped by a clip test (``clip_mode``), whose
advantage may be reweighted (``weight``) and to which a regulariser may be added
(``regularizer``). With rho_t = sg(exp(logprobs - old_logprobs)) and the sequence ratio
s_i = sg(exp(mean_{valid t} (logprobs - old_logprobs))):

    in_t, by clip_mode (e_l, e_h = epsilon_low, epsilon_high; e_l', e_h' the primes):
      none           1
      two-side       1 - e_l <= rho_t <= 1 + e_h
      one-side       (A_t >= 0 and rho_t <= 1 + e_h) or (A_t <= 0 and rho_t >= 1 - e_l)
      gspo-one-side  one-side with s_i in place of rho_t
      ring           two-side, or (A_t >= 0 and rho_t <= 1 - e_l'),
                     or (A_t <= 0 and rho_t >= 1 + e_h')
    W_t, by weight:
      none A_t;  importance_sampling A_t rho_t;  gspo_importance_sampling A_t s_i;
      advantage A_t exp(A_t / temp)
    l_t = -W_t * logprobs_t * in_t  + R_t, by regularizer:
      none 0;  k2 regularizer_coef * (logprobs_t - old_logprobs_t)^2;
      forward-kl -regularizer_coef * logprobs_t

reduced with ``loss_agg_mode`` (the paper's gspo-one-side runs use
``seq-mean-token-mean``). ``ring`` keeps the tokens that moved far the "wrong" way,
which two-side clipping would drop.
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import clamped_log_ratio, masked_mean
from trinity.config.part_args.policy_loss import RECPolicyLossArgs


@POLICY_LOSS_FN.register("rec")
class RECPolicyLoss(PolicyLoss):
    """REINFORCE with an optional clip test, advantage weight and regulariser."""

    Args = RECPolicyLossArgs

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
            seq_ratio = torch.exp(masked_mean(log_ratio, action_mask, dim=-1))[:, None]
            inside = self._inside(ratio, seq_ratio, advantages)
            weighted = self._weighted(advantages, ratio, seq_ratio)
        losses = torch.where(inside, -weighted * logprobs, torch.zeros_like(logprobs))
        if args.regularizer == "k2":
            losses = losses + args.regularizer_coef * (logprobs - old_logprobs).square()
        elif args.regularizer == "forward-kl":
            losses = losses - args.regularizer_coef * logprobs
        loss = aggregate_loss(losses, action_mask, args.loss_agg_mode, normalizer)
        metrics = {
            "pg_loss": loss.item(),
            "pg_clipfrac": masked_mean((~inside).float(), action_mask).item(),
            "ppo_kl": masked_mean(-log_ratio, action_mask).item(),
        }
        return loss, metrics

    def _inside(
        self, ratio: torch.Tensor, seq_ratio: torch.Tensor, advantages: torch.Tensor
    ) -> torch.Tensor:
        """(B, R) bool: the tokens the clip test keeps."""
        args = self.args
        low, high = 1.0 - args.epsilon_low, 1.0 + args.epsilon_high
        up, down = advantages >= 0, advantages <= 0
        if args.clip_mode == "none":
            return torch.ones_like(ratio, dtype=torch.bool)
        if args.clip_mode == "two-side":
            return (ratio >= low) & (ratio <= high)
        if args.clip_mode == "one-side":
            return (up & (ratio <= high)) | (down & (ratio >= low))
        if args.clip_mode == "gspo-one-side":
            return (up & (seq_ratio <= high)) | (down & (seq_ratio >= low))
        # ring
        return (
            ((ratio >= low) & (ratio <= high))
            | (up & (ratio <= 1.0 - args.epsilon_low_prime))
            | (down & (ratio >= 1.0 + args.epsilon_high_prime))
        )

    def _weighted(
        self, advantages: torch.Tensor, ratio: torch.Tensor, seq_ratio: torch.Tensor
    ) -> torch.Tensor:
        """(B, R) the reweighted advantages W_t."""
        weight = self.args.weight
        if weight == "importance_sampling":
            return advantages * ratio
        if weight == "gspo_importance_sampling":
            return advantages * seq_ratio
        if weight == "advantage":
            return advantages * torch.exp(advantages / self.args.temp)
        return advantages
