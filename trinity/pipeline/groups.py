"""Experiences grouped by task (``eid.group``), and the test of a group whose scores all tie.

A group is one task's rollouts in one explore step. When every rollout of a group
scores the same, its group-relative advantages are all zero: it costs a train step's
compute and teaches nothing, so the explorer's dynamic sampling and the experience
filters drop such groups. A group of one always ties.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from trinity.types import Experience


def groups_of(exps: list[Experience]) -> dict[str, list[Experience]]:
    """Experiences by ``eid.group``, groups in first-seen order."""
    groups: dict[str, list[Experience]] = {}
    for exp in exps:
        groups.setdefault(exp.eid.group, []).append(exp)
    return groups


def without_groups(exps: list[Experience], groups: set[str]) -> list[Experience]:
    """``exps`` less the experiences of the named groups, in order."""
    return [exp for exp in exps if exp.eid.group not in groups]


def group_score(exp: Experience, metric_key: str | None) -> float | None:
    """The value compared within a group: ``metric_key``'s component, else the reward.

    A reward component ``name`` is stored as the metric ``reward/<name>``; either
    spelling is accepted.
    """
    if metric_key is None:
        return exp.reward
    for key in (metric_key, f"reward/{metric_key}"):
        if key in exp.metrics:
            return float(exp.metrics[key])
    raise KeyError(
        f"algorithm.dynamic_sampling.metric_key '{metric_key}' is not among the metrics of "
        f"experience {exp.eid} ({sorted(exp.metrics)})"
    )


def ties(values: Iterable[Hashable], atol: float | None = None) -> bool:
    """True when the values are all equal, or at most ``atol`` apart when it is given
    (then they must be numbers); also for one value or none."""
    values = list(values)
    if atol is None:
        return len(set(values)) <= 1
    return not values or max(values) - min(values) <= atol


def is_tied(members: list[Experience], metric_key: str | None = None) -> bool:
    """True when every rollout of the group has the same score (or there is one)."""
    return ties(group_score(m, metric_key) for m in members)
