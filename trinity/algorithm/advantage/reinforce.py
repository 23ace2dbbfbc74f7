"""REINFORCE (Williams, 1992, Machine Learning 8:229-256) without a baseline.

The advantage of every valid token of a response is the response's reward,

    A_i = r_i

so no group is needed and a group of one is fine. Returns = A. With a per-token KL
penalty in the rewards (``kl_penalty_fn``) r_i is the penalised sum. Pair it with a
group baseline elsewhere, or use ``rec`` / ``asymre`` / ``grpo`` for a baselined form.
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage.base import AdvantageFn, AdvantageInputs, broadcast
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.config.part_args.advantage import ReinforceAdvantageArgs


@ADVANTAGE_FN.register("reinforce")
class ReinforceAdvantage(AdvantageFn):
    """The sequence reward on every valid token."""

    Args = ReinforceAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        advantages = broadcast(inputs.scores(), inputs.mask)
        return advantages, advantages.clone()
