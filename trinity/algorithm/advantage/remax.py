"""ReMax advantages (Li et al., arXiv:2310.10505).

The baseline is the reward of the greedy (temperature 0) response to the same prompt,
which the explorer rolls out alongside the sampled one:

    A_t = G_t - r_greedy,    G_t = sum_{k >= t, valid} r_k

Returns are G_t. The trainer supplies ``AdvantageInputs.baseline_rewards`` (B,).
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage.base import (
    AdvantageFn,
    AdvantageInputs,
    MissingInputError,
    discounted_returns,
)
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.config.part_args.advantage import ReMaxAdvantageArgs


@ADVANTAGE_FN.register("remax")
class ReMaxAdvantage(AdvantageFn):
    """Return minus the greedy rollout's reward."""

    Args = ReMaxAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        if inputs.baseline_rewards is None:
            raise MissingInputError(
                "advantage_fn 'remax' needs baseline_rewards: the reward of a greedy "
                "rollout of each row's task"
            )
        mask = inputs.mask
        returns = discounted_returns(inputs.token_level_rewards, mask, gamma=1.0)
        advantages = (returns - inputs.baseline_rewards.to(returns.dtype)[:, None]) * mask
        return advantages, returns
