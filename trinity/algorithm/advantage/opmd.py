"""OPMD: online policy mirror descent advantages (Trinity-RFT, arXiv:2505.17826).

The advantage is the reward minus a group baseline. With ``opmd_baseline: mean`` the
baseline is the group's mean reward; with ``logavgexp`` it is the soft maximum

    b_g = tau * log( (1/N) sum_j exp(r_j / tau) )

which approaches the mean as tau -> inf and the max as tau -> 0. The matching policy loss
(``policy_loss_fn: opmd``) divides by (1 + tau). A group of one gets advantage 0.

``opmd_verl`` is verl's form: the same baselines, but a group of one has baseline 0 and
keeps its raw reward.
"""

from __future__ import annotations

import math

import torch

from trinity.algorithm.advantage.base import (
    AdvantageFn,
    AdvantageInputs,
    broadcast,
    group_stats,
    verl_group_stats,
)
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.config.part_args.advantage import OPMDArgs


def group_logavgexp(scores: torch.Tensor, group_ids: torch.Tensor, tau: float) -> torch.Tensor:
    """(B,) tau * log(mean_g(exp(r / tau))) of each row's group, computed stably."""
    _, index = torch.unique(group_ids, return_inverse=True)
    scaled = scores / tau
    num_groups = int(index.max()) + 1
    # subtract each group's max before exponentiating (small tau overflows otherwise)
    group_max = scaled.new_full((num_groups,), -math.inf).scatter_reduce(
        0, index, scaled, reduce="amax"
    )
    sums = scaled.new_zeros(num_groups).index_add(0, index, torch.exp(scaled - group_max[index]))
    sizes = scaled.new_zeros(num_groups).index_add(0, index, torch.ones_like(scaled))
    return tau * (group_max + torch.log(sums / sizes))[index]


@ADVANTAGE_FN.register("opmd")
class OPMDAdvantage(AdvantageFn):
    """Reward minus a group mean (or soft-max) baseline."""

    Args = OPMDArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        scores = inputs.scores()
        stats = group_stats(scores, inputs.group_ids)
        if self.args.opmd_baseline == "mean":
            baseline = stats.mean
        else:
            baseline = group_logavgexp(scores, inputs.group_ids, self.args.tau)
        per_row = torch.where(stats.size > 1, scores - baseline, torch.zeros_like(scores))
        advantages = broadcast(per_row, inputs.mask)
        return advantages, advantages.clone()


@ADVANTAGE_FN.register("opmd_verl")
class OPMDVerlAdvantage(AdvantageFn):
    """OPMD as verl computes it: a group of one has baseline 0."""

    Args = OPMDArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        scores = inputs.scores()
        stats = verl_group_stats(scores, inputs.group_ids)
        if self.args.opmd_baseline == "mean":
            baseline = stats.mean
        else:
            baseline = group_logavgexp(scores, inputs.group_ids, self.args.tau)
            baseline = torch.where(stats.size > 1, baseline, torch.zeros_like(baseline))
        advantages = broadcast(scores - baseline, inputs.mask)
        return advantages, advantages.clone()
