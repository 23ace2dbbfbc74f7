"""Clip_B and Clip_V: GRPO advantages that spare entropy (Wang et al., "On the Entropy
Dynamics in Reinforcement Fine-Tuning of Large Language Models", arXiv:2602.03392).

To first order, a policy-gradient step on token a with advantage A changes the entropy
in proportion to -A (S - N): with p = pi_old(a), H the entropy of the distribution and

    S_t = p_t (log p_t + H_t)                     the token's entropy discriminant
    N_t = sum_x pi_old(x)^2 (log pi_old(x) + H_t)  its expectation over the vocabulary

a token far below the rest (S << N) with a negative advantage drives the entropy down.
Both functions start from GRPO in verl's form (``grpo_verl``: a group of one keeps its
raw reward) and set the advantage of such negative-advantage tokens to 0; positive- and
zero-advantage tokens are never touched.

``clipb`` (batch-normalised): with mean mu_S and population std sigma_S of S over every
valid token of the batch, clip A_t < 0 where S_t - mu_S < -mu * sigma_S.
``clipv`` (vocabulary-normalised): with D_t = N_t - S_t and sigma_D its population std
over the valid tokens, clip A_t < 0 where D_t > mu * sigma_D; if that is more than a
fraction ``max_frac`` of the n valid tokens, clip only the k = max(floor(max_frac n), 1)
with the largest D_t. Nothing is clipped when the std is below 1e-12.

Inputs: ``old_logprobs`` and ``old_entropies`` (both), ``old_discriminant_baselines``
(N_t, clipv). Upstream removes clipped tokens from the loss mask; here they stay in the
batch with advantage 0 (no policy gradient, still counted by token-mean aggregation).
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage.base import AdvantageFn, AdvantageInputs, broadcast, require
from trinity.algorithm.advantage.grpo import verl_grpo_scores
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.algorithm.utils import masked_mean, masked_var
from trinity.config.part_args.advantage import ClipBAdvantageArgs, ClipVAdvantageArgs

NO_SPREAD = 1e-12  # below this std the discriminant carries no signal: clip nothing


def discriminant(inputs: AdvantageInputs, owner: str) -> torch.Tensor:
    """(B, R) S_t = p_t (log p_t + H_t), 0 on masked tokens."""
    logprobs = require(inputs.old_logprobs, "old_logprobs", owner, "pi_old's log-probs")
    entropies = require(
        inputs.old_entropies, "old_entropies", owner, "pi_old's entropy at each token"
    )
    s = logprobs.exp() * (logprobs + entropies)
    return torch.where(inputs.action_mask.bool(), s, torch.zeros_like(s))


def population_std(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Std (N, not N - 1) of ``values`` over the set entries of ``mask``."""
    return masked_var(values, mask, unbiased=False).sqrt()


@ADVANTAGE_FN.register("clipb")
class ClipBAdvantage(AdvantageFn):
    """GRPO, with batch-normalised entropy clipping of negative-advantage tokens."""

    Args = ClipBAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        mask = inputs.mask
        advantages = broadcast(verl_grpo_scores(inputs, self.args.epsilon), mask)
        s = discriminant(inputs, "clipb")
        std = population_std(s, mask)
        if std > NO_SPREAD:
            low = s - masked_mean(s, mask) < -self.args.mu * std
            advantages = torch.where((advantages < 0) & low, 0.0, advantages)
        return advantages, advantages.clone()


@ADVANTAGE_FN.register("clipv")
class ClipVAdvantage(AdvantageFn):
    """GRPO, with vocabulary-normalised entropy clipping of a few negative tokens."""

    Args = ClipVAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        mask = inputs.mask
        advantages = broadcast(verl_grpo_scores(inputs, self.args.epsilon), mask)
        baselines = require(
            inputs.old_discriminant_baselines,
            "old_discriminant_baselines",
            "clipv",
            "sum_x pi_old(x)^2 (log pi_old(x) + H) at each token",
        )
        d = torch.where(mask.bool(), baselines, torch.zeros_like(baselines))
        d = d - discriminant(inputs, "clipv")
        std = population_std(d, mask)
        if std > NO_SPREAD:
            candidates = mask.bool() & (advantages < 0) & (d > self.args.mu * std)
            limit = max(int(self.args.max_frac * int(mask.sum())), 1)
            k = min(int(candidates.sum()), limit)
            ranked = torch.where(candidates, d, -torch.inf).flatten()
            clipped = torch.zeros_like(ranked, dtype=torch.bool)
            clipped[torch.topk(ranked, k).indices] = True
            advantages = torch.where(clipped.view_as(d), 0.0, advantages)
        return advantages, advantages.clone()
