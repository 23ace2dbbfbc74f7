"""GRPO: group-relative advantages (DeepSeekMath, arXiv:2402.03300).

Each task is rolled out several times; a response's advantage is its reward measured
against the other responses to the same task:

    A_i = (r_i - mean_g(r)) / (std_g(r) + epsilon)      std_normalize = true
    A_i =  r_i - mean_g(r)                              std_normalize = false (Dr. GRPO,
                                                        arXiv:2503.20783)

std_g is the sample standard deviation (N - 1). A group of one has no peer to compare
against and gets advantage 0. A_i is spread over the response's valid tokens; returns = A.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trinity.algorithm.advantage.base import (
    AdvantageFn,
    AdvantageInputs,
    broadcast,
    group_stats,
)
from trinity.algorithm.registries import ADVANTAGE_FN


@ADVANTAGE_FN.register("grpo")
class GRPOAdvantage(AdvantageFn):
    """Group-normalised outcome advantage."""

    @dataclass
    class Args:
        std_normalize: bool = True  # divide by the group's standard deviation
        epsilon: float = 1e-6  # added to the std so identical rewards give 0, not NaN

        def __post_init__(self) -> None:
            if self.epsilon < 0:
                raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        scores = inputs.scores()
        stats = group_stats(scores, inputs.group_ids)
        centred = scores - stats.mean
        if self.args.std_normalize:
            centred = centred / (stats.std + self.args.epsilon)
        per_row = torch.where(stats.size > 1, centred, torch.zeros_like(centred))
        advantages = broadcast(per_row, inputs.mask)
        return advantages, advantages.clone()
