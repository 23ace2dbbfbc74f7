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

from dataclasses import dataclass

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss, check_loss_agg_mode
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import clamped_log_ratio, masked_mean

CLIP_MODES = ("none", "one-side", "gspo-one-side", "two-side", "ring")
WEIGHTS = ("none", "importance_sampling", "gspo_importance_sampling", "advantage")
REGULARIZERS = ("none", "k2", "forward-kl")


def _check_choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")


@POLICY_LOSS_FN.register("rec")
class RECPolicyLoss(PolicyLoss):
    """REINFORCE with an optional clip test, advantage weight and regulariser."""

    @dataclass
    class Args:
        epsilon_low: float = 0.2  # ratio floor 1 - epsilon_low of the clip tests
        epsilon_high: float = 0.2  # ratio ceiling 1 + epsilon_high of the clip tests
        epsilon_low_prime: float = 0.6  # ring: A >= 0 tokens below 1 - this are kept
        epsilon_high_prime: float = 2.0  # ring: A <= 0 tokens above 1 + this are kept
        clip_mode: str = "none"  # none, one-side, gspo-one-side, two-side, ring
        weight: str = "none"  # none, importance_sampling, gspo_importance_sampling, advantage
        regularizer: str = "none"  # none, k2, forward-kl
        regularizer_coef: float = 0.0  # weight of the regulariser
        temp: float = 1.0  # temperature of the advantage weight exp(A / temp)
        loss_agg_mode: str = "token-mean"

        def __post_init__(self) -> None:
            check_loss_agg_mode(self.loss_agg_mode)
            _check_choice("clip_mode", self.clip_mode, CLIP_MODES)
            _check_choice("weight", self.weight, WEIGHTS)
            _check_choice("regularizer", self.regularizer, REGULARIZERS)
            for name in ("epsilon_low", "epsilon_low_prime"):
                if not 0.0 < getattr(self, name) <= 1.0:
                    raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
            for name in ("epsilon_high", "epsilon_high_prime", "temp"):
                if getattr(self, name) <= 0:
                    raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
            if self.regularizer_coef < 0:
                raise ValueError(f"regularizer_coef must be >= 0, got {self.regularizer_coef}")

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
