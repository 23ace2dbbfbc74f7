"""RLOO: REINFORCE leave-one-out (Ahmadian et al., arXiv:2402.14740).

Each response is compared with the mean reward of the *other* responses to its task:

    A_i = r_i - (1/(N-1)) sum_{j != i} r_j  =  N/(N-1) * (r_i - mean_g(r))

A group of one has no other response and gets advantage 0. Returns = advantages.
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage.base import (
    AdvantageFn,
    AdvantageInputs,
    broadcast,
    group_stats,
)
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.config.part_args.advantage import RLOOAdvantageArgs


@ADVANTAGE_FN.register("rloo")
class RLOOAdvantage(AdvantageFn):
    """Leave-one-out baseline within each group."""

    Args = RLOOAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        scores = inputs.scores()
        stats = group_stats(scores, inputs.group_ids)
        scale = stats.size / (stats.size - 1).clamp(min=1)
        per_row = torch.where(
            stats.size > 1, scale * (scores - stats.mean), torch.zeros_like(scores)
        )
        advantages = broadcast(per_row, inputs.mask)
        return advantages, advantages.clone()
