"""Per-task pass rates of a batch, as metrics; experiences pass through unchanged.

``pass_rate_stats``: how many groups the policy always, never or sometimes solves.

A run counts as passed when its score (``exp.reward``, or ``exp.metrics[key]`` when
``key`` is set, e.g. ``accuracy``) is at least ``threshold``. Over the groups of a batch
(same ``eid.group``) it reports the fractions of groups with every run passed
(``all_correct``), none passed (``none_correct``) and some passed (``mixed``), and the
mean per-group pass rate. Groups of one are counted too. Experiences pass through
unchanged; runs without a score are left out of the counts.

``pass_rate_calculator`` (Trinity-RFT's, listed by its BOTS configs): a task's pass
rate is the mean reward of its experiences in the batch, and the metrics are upstream's
``selection/*`` fractions of tasks: ``valid_ratio`` 0 < p < 1, ``strict_valid_ratio``
1/16 < p < 15/16, ``<1_ratio``, ``>0_ratio``, ``<15_16_ratio``, ``>1_16_ratio`` (the
sixteenths, upstream's, with a margin of 1e-3, suit 16 rollouts per task). Upstream
also hands the per-task rates to its task selector; here the explorer gives each
step's rewards to the ``difficulty_based`` selector itself.
"""

from __future__ import annotations

from collections.abc import Callable

from trinity.pipeline.experience_filters import is_valid_reward
from trinity.pipeline.groups import groups_of
from trinity.pipeline.operator import EXPERIENCE_OPERATORS, ExperienceOperator
from trinity.types import Experience


@EXPERIENCE_OPERATORS.register("pass_rate_stats")
class PassRateStats(ExperienceOperator):
    def __init__(self, threshold: float = 1.0, key: str | None = None) -> None:
        self.threshold = threshold
        self.key = key

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        rates = []
        for members in groups_of(exps).values():
            scores = [self._score(m) for m in members]
            scores = [s for s in scores if is_valid_reward(s)]
            if scores:
                rates.append(sum(s >= self.threshold for s in scores) / len(scores))
        if not rates:
            return exps, {}
        n = len(rates)
        return exps, {
            "pass_rate/groups": float(n),
            "pass_rate/all_correct": sum(r == 1.0 for r in rates) / n,
            "pass_rate/none_correct": sum(r == 0.0 for r in rates) / n,
            "pass_rate/mixed": sum(0.0 < r < 1.0 for r in rates) / n,
            "pass_rate/mean": sum(rates) / n,
        }

    def _score(self, exp: Experience) -> float | None:
        if self.key is None:
            return exp.reward
        value = exp.metrics.get(self.key)
        return None if value is None else float(value)


_SIXTEENTH = 1 / 16 + 1e-3  # upstream's bounds, for 16 rollouts per task
_FIFTEEN_SIXTEENTHS = 15 / 16 - 1e-3


@EXPERIENCE_OPERATORS.register("pass_rate_calculator")
class PassRateCalculator(ExperienceOperator):
    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        rates = []
        for members in groups_of(exps).values():
            rewards = [m.reward for m in members if is_valid_reward(m.reward)]
            if rewards:
                rates.append(sum(rewards) / len(rewards))
        if not rates:
            return exps, {}

        def share(test: Callable[[float], bool]) -> float:
            return sum(1 for r in rates if test(r)) / len(rates)

        return exps, {
            "selection/valid_ratio": share(lambda r: 0 < r < 1),
            "selection/strict_valid_ratio": share(lambda r: _SIXTEENTH < r < _FIFTEEN_SIXTEENTHS),
            "selection/<1_ratio": share(lambda r: r < 1),
            "selection/>0_ratio": share(lambda r: r > 0),
            "selection/<15_16_ratio": share(lambda r: r < _FIFTEEN_SIXTEENTHS),
            "selection/>1_16_ratio": share(lambda r: r > _SIXTEENTH),
        }
