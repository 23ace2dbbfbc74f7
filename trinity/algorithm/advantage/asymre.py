"""AsymRE: asymmetric REINFORCE (Arnal et al., arXiv:2506.20520).

REINFORCE with the group mean as baseline, shifted by a constant:

    A_i = r_i - (mean_g(r) + baseline_shift)

A baseline below the mean (``baseline_shift < 0``, default -0.1) weighs the responses
that did better than their group more than those that did worse, which the paper shows
keeps off-policy training stable. A group of one gets advantage 0. Returns = A.

``asymre_verl`` is verl's form: a group of one has baseline 0 and keeps its raw reward.
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage.base import (
    AdvantageFn,
    AdvantageInputs,
    broadcast,
    group_stats,
    verl_group_stats,
)
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.config.part_args.advantage import AsymREArgs


@ADVANTAGE_FN.register("asymre")
class AsymREAdvantage(AdvantageFn):
    """Reward minus the shifted group mean."""

    Args = AsymREArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        scores = inputs.scores()
        stats = group_stats(scores, inputs.group_ids)
        shifted = scores - (stats.mean + self.args.baseline_shift)
        per_row = torch.where(stats.size > 1, shifted, torch.zeros_like(shifted))
        advantages = broadcast(per_row, inputs.mask)
        return advantages, advantages.clone()


@ADVANTAGE_FN.register("asymre_verl")
class AsymREVerlAdvantage(AdvantageFn):
    """AsymRE as verl computes it: a group of one has baseline 0."""

    Args = AsymREArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        scores = inputs.scores()
        stats = verl_group_stats(scores, inputs.group_ids)
        shift = torch.where(stats.size > 1, self.args.baseline_shift, 0.0)
        advantages = broadcast(scores - (stats.mean + shift), inputs.mask)
        return advantages, advantages.clone()
