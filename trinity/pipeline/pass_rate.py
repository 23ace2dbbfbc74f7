"""``pass_rate_stats``: how many groups the policy always, never or sometimes solves.

A run counts as passed when its score (``exp.reward``, or ``exp.metrics[key]`` when
``key`` is set, e.g. ``accuracy``) is at least ``threshold``. Over the groups of a batch
(same ``eid.group``) it reports the fractions of groups with every run passed
(``all_correct``), none passed (``none_correct``) and some passed (``mixed``), and the
mean per-group pass rate. Groups of one are counted too. Experiences pass through
unchanged; runs without a score are left out of the counts.
"""

from __future__ import annotations

from trinity.pipeline.experience_filters import groups_of, is_valid_reward
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
