"""CHORD: RL and SFT harmonised by a dynamic weight (Zhang et al., arXiv:2508.11408), and
its two token-weighted SFT losses.

With p_t = exp(logprobs_t) the probability of the demonstrated token:

- ``sft_is``:  l_t = -sg(p_t) * logprobs_t, i.e. the SFT gradient weighted by p_t,
  which leaves tokens the policy finds unlikely alone.
- ``sft_phi``: l_t = -sg(phi_t) * min(logprobs_t, log cutoff_prob), phi_t = p_t (1 - p_t):
  the weight vanishes on tokens the policy already predicts and on those it finds
  implausible, so expert data shapes the policy without overwriting it. Tokens with
  p_t > ``cutoff_prob`` (default 1: none) get no gradient.
- ``mix_chord``: like ``mix``, rows flagged ``is_expert`` are demonstrations:

      loss = (1 - mu) * L_ppo(rollout rows) + mu * L_sft(expert rows)

  where L_sft is the ``sft_phi`` loss (``enable_phi_function``, default) or the plain
  negative log-likelihood, and mu follows a schedule in the trainer's ``global_step`` s:
  a linear warm-up from 0 to ``mu_peak`` over ``mu_warmup_steps``, then a cosine decay
  to ``mu_valley`` over ``mu_decay_steps``, then ``mu_valley``:

      mu(s) = mu_peak * s / W                                   s < W
            = mu_valley + (mu_peak - mu_valley) (1 + cos(pi (s - W) / D)) / 2
                                                                W <= s < W + D
            = mu_valley                                         s >= W + D

  Each part is averaged over its own rows of the whole mini-batch (``normalizer`` and
  ``expert_normalizer``, as for ``mix``); it takes ``mix``'s arguments (``MixArgs``).
"""

from __future__ import annotations

import math

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.policy_loss.ppo import clipped_pg_loss
from trinity.algorithm.policy_loss.sft import nll_loss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.config.part_args.policy_loss import (
    LossAggModeArgs,
    MixCHORDPolicyLossArgs,
    SFTPhiLossArgs,
)


def phi_weighted_nll(
    logprobs: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str,
    normalizer: LossNormalizer | None,
    cutoff_prob: float = 1.0,
) -> torch.Tensor:
    """Aggregated -sg(p (1 - p)) * min(logprobs, log cutoff_prob) (``sft_phi``)."""
    prob = torch.exp(logprobs.detach())
    phi = prob * (1.0 - prob)
    if cutoff_prob < 1.0:
        logprobs = logprobs.clamp(max=math.log(cutoff_prob))
    return aggregate_loss(-phi * logprobs, action_mask, loss_agg_mode, normalizer)


def chord_mu(
    step: int, mu_warmup_steps: int, mu_decay_steps: int, mu_peak: float, mu_valley: float
) -> float:
    """The SFT weight mu at ``step`` (warm-up, cosine decay, floor; module docstring)."""
    if step < mu_warmup_steps:
        return mu_peak * step / mu_warmup_steps
    if step >= mu_warmup_steps + mu_decay_steps:
        return mu_valley
    progress = (step - mu_warmup_steps) / mu_decay_steps
    return mu_valley + (mu_peak - mu_valley) * 0.5 * (1.0 + math.cos(math.pi * progress))


@POLICY_LOSS_FN.register("sft_is")
class SFTISLoss(PolicyLoss):
    """Negative log-likelihood weighted by the token's own (stop-gradient) probability."""

    Args = LossAggModeArgs

    inputs = frozenset()

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
        weight = torch.exp(logprobs.detach())
        loss = aggregate_loss(-weight * logprobs, action_mask, self.args.loss_agg_mode, normalizer)
        return loss, {"sft_loss": loss.item()}


@POLICY_LOSS_FN.register("sft_phi")
class SFTPhiLoss(PolicyLoss):
    """Negative log-likelihood weighted by p (1 - p) of the token (stop-gradient)."""

    Args = SFTPhiLossArgs

    inputs = frozenset()

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
        args = self.args
        loss = phi_weighted_nll(
            logprobs, action_mask, args.loss_agg_mode, normalizer, args.cutoff_prob
        )
        return loss, {"sft_loss": loss.item()}


@POLICY_LOSS_FN.register("mix_chord")
class MixCHORDPolicyLoss(PolicyLoss):
    """PPO on rollouts plus a scheduled, phi-weighted SFT loss on demonstrations."""

    Args = MixCHORDPolicyLossArgs

    inputs = frozenset({"old_logprobs", "advantages", "is_expert", "global_step"})

    def mu(self, step: int) -> float:
        args = self.args
        return chord_mu(
            step, args.mu_warmup_steps, args.mu_decay_steps, args.mu_peak, args.mu_valley
        )

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
        self.require(
            old_logprobs=old_logprobs,
            advantages=advantages,
            is_expert=is_expert,
            global_step=global_step,
        )
        args = self.args
        expert = is_expert.bool()
        rollout = ~expert
        pg_loss, metrics = clipped_pg_loss(
            logprobs[rollout],
            old_logprobs[rollout],
            advantages[rollout],
            action_mask[rollout],
            args,
            normalizer,
        )
        if args.enable_phi_function:
            sft_loss = phi_weighted_nll(
                logprobs[expert], action_mask[expert], args.sft_loss_agg_mode, expert_normalizer
            )
        else:
            sft_loss = nll_loss(
                logprobs[expert], action_mask[expert], args.sft_loss_agg_mode, expert_normalizer
            )
        mu = self.mu(global_step)
        loss = (1.0 - mu) * pg_loss + mu * sft_loss
        metrics.update(sft_loss=sft_loss.item(), mix_loss=loss.item(), chord_mu=mu)
        return loss, metrics
