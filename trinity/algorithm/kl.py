"""KL divergence between the policy and the frozen reference model.

One registry serves two config keys: ``kl_penalty_fn`` subtracts ``kl_coef * KL_t`` from
the token-level rewards before advantages are computed (``apply_penalty``), and
``kl_loss_fn`` adds ``kl_coef * aggregated KL`` to the actor loss (``loss``).

With log_ratio = logprobs - ref_logprobs (log pi / pi_ref) at the sampled token, the
estimators of KL(pi || pi_ref) (Schulman, "Approximating KL divergence", 2020) are:

- ``k1``: log_ratio                              unbiased, high variance, can be negative
- ``k2``: 0.5 * log_ratio^2                      biased, low variance, >= 0
- ``k3``: exp(-log_ratio) - 1 + log_ratio        unbiased, low variance, >= 0
- ``low_var_kl``: k3 clamped to [-10, 10] (its exponent to [-20, 20]), as GRPO uses it
- ``abs``: |log_ratio|
- ``corrected_k3``: clip(pi / pi_old, 0, 2) * k3, the importance-corrected k3 of
  DeepSeek-V3.2 (arXiv:2512.02556). The samples come from pi_old, not pi, so plain k3
  is a biased estimate of KL(pi || pi_ref) once the policy has moved; the ratio (with
  its gradient) corrects the estimate and its gradient. Without ``old_logprobs`` (and in
  ``apply_penalty``, where the policy is pi_old) it equals k3.
- ``none``: 0 (no reference model needed)
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.registries import KL_FN
from trinity.algorithm.utils import masked_sum
from trinity.config.part_args.kl import KLFnArgs


class KLFn(ABC):
    """Base of the KL estimators: subclasses implement ``estimate``."""

    Args = KLFnArgs

    uses_reference: bool = True  # False only for "none": no reference forward needed

    def __init__(self, args: Args | None = None) -> None:
        self.args = args if args is not None else self.Args()

    @abstractmethod
    def estimate(self, log_ratio: torch.Tensor) -> torch.Tensor:
        """Per-token KL estimate from log(pi / pi_ref), same shape."""

    def per_token(
        self,
        logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor,
        old_logprobs: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, R) KL estimate at each token; ``old_logprobs`` (the sampling policy's) are
        read by ``corrected_k3`` only."""
        return self.estimate(logprobs - ref_logprobs)

    def loss(
        self,
        logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor,
        action_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        normalizer: LossNormalizer | None = None,
        old_logprobs: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``kl_coef`` * aggregated KL, to add to the actor loss (``kl_loss_fn``).

        Metrics: ``kl_loss`` (the unweighted aggregated KL, this micro-batch's share when
        a mini-batch ``normalizer`` is given) and ``kl_coef``.
        """
        kl = aggregate_loss(
            self.per_token(logprobs, ref_logprobs, old_logprobs),
            action_mask,
            loss_agg_mode,
            normalizer,
        )
        return self.args.kl_coef * kl, {"kl_loss": kl.item(), "kl_coef": self.args.kl_coef}

    def apply_penalty(
        self,
        token_level_rewards: torch.Tensor,
        logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor,
        action_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards - kl_coef * KL_t on the valid tokens (``kl_penalty_fn``), (B, R).

        Metrics: ``kl`` (mean over sequences of the summed token KL) and ``kl_coef``.
        """
        with torch.no_grad():
            kl = self.per_token(logprobs, ref_logprobs)
            kl = torch.where(action_mask.bool(), kl, torch.zeros_like(kl))
            rewards = token_level_rewards - self.args.kl_coef * kl
            seq_kl = masked_sum(kl, action_mask, dim=-1)
        return rewards, {"kl": seq_kl.mean().item(), "kl_coef": self.args.kl_coef}


@KL_FN.register("none")
class NoKL(KLFn):
    """No KL term: zero loss, rewards unchanged."""

    uses_reference = False

    def estimate(self, log_ratio: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(log_ratio)

    def loss(
        self,
        logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None,
        action_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        normalizer: LossNormalizer | None = None,
        old_logprobs: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return logprobs.new_zeros(()), {}

    def apply_penalty(
        self,
        token_level_rewards: torch.Tensor,
        logprobs: torch.Tensor | None,
        ref_logprobs: torch.Tensor | None,
        action_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return token_level_rewards, {}


@KL_FN.register("k1")
class K1(KLFn):
    def estimate(self, log_ratio: torch.Tensor) -> torch.Tensor:
        return log_ratio


@KL_FN.register("k2")
class K2(KLFn):
    def estimate(self, log_ratio: torch.Tensor) -> torch.Tensor:
        return 0.5 * log_ratio.square()


@KL_FN.register("k3")
class K3(KLFn):
    def estimate(self, log_ratio: torch.Tensor) -> torch.Tensor:
        return torch.exp(-log_ratio) - 1.0 + log_ratio


@KL_FN.register("low_var_kl")
class LowVarKL(KLFn):
    def estimate(self, log_ratio: torch.Tensor) -> torch.Tensor:
        # clamping the exponent keeps a wildly off reference token from producing inf
        neg = (-log_ratio).clamp(-20.0, 20.0)
        return (torch.exp(neg) - 1.0 - neg).clamp(-10.0, 10.0)


@KL_FN.register("abs")
class AbsKL(KLFn):
    def estimate(self, log_ratio: torch.Tensor) -> torch.Tensor:
        return log_ratio.abs()


@KL_FN.register("corrected_k3")
class CorrectedK3(K3):
    """k3 weighted by the importance ratio pi / pi_old, clipped to [0, 2]."""

    def per_token(
        self,
        logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor,
        old_logprobs: torch.Tensor | None = None,
    ) -> torch.Tensor:
        k3 = self.estimate(logprobs - ref_logprobs)
        if old_logprobs is None:
            return k3
        # the clamp of the exponent only guards exp against overflow; [0, 2] is the clip
        ratio = torch.exp((logprobs - old_logprobs).clamp(max=20.0)).clamp(0.0, 2.0)
        return ratio * k3
