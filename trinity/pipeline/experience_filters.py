"""Experience filters: drop what would only add noise to a training step.

- ``invalid_reward_filter`` drops experiences whose reward is missing, NaN or
  infinite (with ``drop_group: true``, their whole group, so group advantages are not
  computed from survivors only);
- ``zero_variance_filter`` drops groups (same ``eid.group``: same explore step and
  task) whose rewards are all equal: their group-relative advantages are all zero, so
  they cost compute and teach nothing. A group of one has zero variance too;
- ``reward_filter`` keeps experiences whose reward is at least ``threshold``;
- ``reward_std_filter`` keeps groups of two or more whose rewards' population standard
  deviation is above ``threshold``.

The last two are Trinity-RFT's operators under its names and arguments. A missing or
NaN reward passes neither: it is not at least any threshold, and it makes its group's
deviation unknown.
"""

from __future__ import annotations

import math

import numpy as np

from trinity.pipeline.groups import groups_of, ties, without_groups
from trinity.pipeline.operator import EXPERIENCE_OPERATORS, ExperienceOperator
from trinity.types import Experience


def is_valid_reward(reward: float | None) -> bool:
    return reward is not None and math.isfinite(reward)


@EXPERIENCE_OPERATORS.register("invalid_reward_filter")
class InvalidRewardFilter(ExperienceOperator):
    def __init__(self, drop_group: bool = False) -> None:
        self.drop_group = drop_group

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        if self.drop_group:
            bad = {e.eid.group for e in exps if not is_valid_reward(e.reward)}
            kept = without_groups(exps, bad)
        else:
            kept = [e for e in exps if is_valid_reward(e.reward)]
        return kept, {"invalid_reward_filter/dropped": float(len(exps) - len(kept))}


@EXPERIENCE_OPERATORS.register("zero_variance_filter")
class ZeroVarianceFilter(ExperienceOperator):
    def __init__(self, atol: float = 0.0) -> None:
        self.atol = atol  # rewards within atol of each other count as equal

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        flat = set()
        for group, members in groups_of(exps).items():
            rewards = [m.reward for m in members]
            if None in rewards:
                continue  # not scored: left for invalid_reward_filter to judge
            if ties(rewards, self.atol):
                flat.add(group)
        kept = without_groups(exps, flat)
        return kept, {
            "zero_variance_filter/dropped_groups": float(len(flat)),
            "zero_variance_filter/dropped": float(len(exps) - len(kept)),
        }


@EXPERIENCE_OPERATORS.register("reward_filter")
class RewardFilter(ExperienceOperator):
    def __init__(self, threshold: float = 0.0) -> None:
        self.threshold = threshold

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        kept = [e for e in exps if e.reward is not None and e.reward >= self.threshold]
        return kept, {"reward_filter/dropped": float(len(exps) - len(kept))}


@EXPERIENCE_OPERATORS.register("reward_std_filter")
class RewardStdFilter(ExperienceOperator):
    def __init__(self, threshold: float = 0.0) -> None:
        self.threshold = threshold

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        dropped = set()
        for group, members in groups_of(exps).items():
            rewards = [math.nan if m.reward is None else m.reward for m in members]
            # NaN > threshold is False: a group with an unknown reward is dropped
            if len(members) < 2 or not float(np.std(rewards)) > self.threshold:
                dropped.add(group)
        kept = without_groups(exps, dropped)
        return kept, {
            "reward_std_filter/dropped_groups": float(len(dropped)),
            "reward_std_filter/dropped": float(len(exps) - len(kept)),
        }
