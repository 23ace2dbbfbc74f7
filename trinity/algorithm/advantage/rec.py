"""REC: group-relative REINFORCE advantages (Yao et al., arXiv:2509.24203).

The REC family reads GRPO as off-policy REINFORCE with a group-mean baseline; the
clipping and importance weighting live in the policy loss, the advantage is

    A_i = r_i - mean_k(r)                                  std_normalize = false
    A_i = (r_i - mean_k(r)) / (pstd_k(r) + epsilon)        std_normalize = true

over the group's kept responses k, with pstd the population std (N, not N - 1).

``drop: balance`` (the paper's RED-Drop) makes a group with more below-mean responses
than at-or-above-mean ones (r_i >= mean_g) even: it drops that many below-mean responses
at random (torch's global generator), then takes the mean and std over the rest.
Dropped rows stay in the batch with advantage 0. A group of one gets advantage 0.
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage.base import (
    AdvantageFn,
    AdvantageInputs,
    broadcast,
    group_index,
    group_stats,
    rank_in_group,
)
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.config.part_args.advantage import RECAdvantageArgs


def balance_keep(scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """(B,) bool: all at-or-above-mean rows, and as many random below-mean rows of each group."""
    stats = group_stats(scores, group_ids)
    above = scores >= stats.mean
    index, num_groups = group_index(group_ids)
    n_above = index.new_zeros(num_groups).index_add(0, index, above.long())
    n_below = torch.bincount(index, minlength=num_groups) - n_above
    extra = (n_below - n_above).clamp(min=0)
    # a random order of each group's below-mean rows; above-mean rows sort after them
    lottery = torch.where(above, torch.full_like(scores, 2.0), torch.rand_like(scores))
    drop = ~above & (rank_in_group(lottery, index) < extra[index])
    return ~drop


@ADVANTAGE_FN.register("rec")
class RECAdvantage(AdvantageFn):
    """Group-mean baseline, optionally normalised and balanced."""

    Args = RECAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        scores = inputs.scores()
        keep = torch.ones_like(scores, dtype=torch.bool)
        if self.args.drop == "balance":
            keep = balance_keep(scores, inputs.group_ids)
        per_row = torch.zeros_like(scores)
        kept = scores[keep]
        stats = group_stats(kept, inputs.group_ids[keep])
        centred = kept - stats.mean
        if self.args.std_normalize:
            pstd = stats.std * torch.sqrt((stats.size - 1) / stats.size)
            centred = centred / (pstd + self.args.epsilon)
        per_row[keep] = torch.where(stats.size > 1, centred, torch.zeros_like(centred))
        advantages = broadcast(per_row, inputs.mask)
        return advantages, advantages.clone()
