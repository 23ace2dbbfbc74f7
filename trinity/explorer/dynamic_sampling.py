"""DAPO's dynamic sampling (Yu et al., arXiv:2503.14476, section 3.2).

A group whose rollouts all score the same has group-relative advantages of zero: it
costs a train step's compute and teaches nothing. With ``algorithm.dynamic_sampling``
the explorer drops such groups and rolls out further batches of tasks until the step
holds ``buffer.batch_size`` groups, at most ``max_extra_rounds`` extra batches; the
groups beyond ``batch_size`` in the last batch are left out (``surplus_groups``). A step
still short after the last round is topped up with tied groups it dropped
(``topped_up_groups``): their advantages are zero, and the trainer, which reads a full
batch per step, gets one instead of waiting for rollouts that will not come.

The score compared is the reward, or the reward component ``metric_key`` (e.g.
``accuracy``, so that DAPO's overlong penalty does not break a tie of a group whose
answers are all right or all wrong). A group of one rollout is always tied.

    fill = fill_groups(roll_out, batch_size=2, max_extra_rounds=4)
    # round 0: groups a (rewards 1, 0) and b (0, 0) -> keep a, drop b
    # round 1: groups c (1, 1) and d (0, 1)         -> drop c, keep d: full
    # fill.experiences = a's and d's rollouts, fill.rounds = 2, fill.dropped_groups = 2
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from trinity.pipeline.groups import groups_of, is_tied
from trinity.types import Experience


@dataclass
class Fill:
    """What ``fill_groups`` kept and what it cost."""

    experiences: list[Experience] = field(default_factory=list)  # the kept groups' rollouts
    sampled: list[Experience] = field(default_factory=list)  # every rollout of every round
    rounds: int = 0  # batches of tasks rolled out (1 + extra rounds)
    kept_groups: int = 0
    dropped_groups: int = 0  # tied groups left out
    surplus_groups: int = 0  # untied groups beyond batch_size, left out
    topped_up_groups: int = 0  # tied groups put back into a step still short at the end
    exhausted: bool = False  # the taskset ended before the step was full


def fill_groups(
    roll_out: Callable[[int], list[Experience] | None],
    batch_size: int,
    max_extra_rounds: int,
    metric_key: str | None = None,
) -> Fill:
    """Call ``roll_out(round)`` (round 0, 1, ...; None: the taskset is exhausted) until
    ``batch_size`` untied groups are kept or ``1 + max_extra_rounds`` rounds are done;
    then tops a short step up with dropped tied groups, in the order they came."""
    if batch_size < 1 or max_extra_rounds < 0:
        raise ValueError(
            f"batch_size must be >= 1 and max_extra_rounds >= 0, got {batch_size} and "
            f"{max_extra_rounds}"
        )
    fill = Fill()
    kept: dict[str, list[Experience]] = {}
    tied: dict[str, list[Experience]] = {}
    for round_ in range(1 + max_extra_rounds):
        exps = roll_out(round_)
        if exps is None:
            fill.exhausted = True
            break
        fill.rounds += 1
        fill.sampled.extend(exps)
        for group, members in groups_of(exps).items():
            if is_tied(members, metric_key):
                fill.dropped_groups += 1
                tied.setdefault(group, members)
            elif len(kept) >= batch_size or group in kept:
                fill.surplus_groups += 1  # (or the same task read twice in one step)
            else:
                kept[group] = members
        if len(kept) >= batch_size:
            break
    fill.kept_groups = len(kept)
    for group, members in tied.items():
        if len(kept) >= batch_size:
            break
        if group not in kept:
            kept[group] = members
            fill.topped_up_groups += 1
    fill.experiences = [exp for members in kept.values() for exp in members]
    return fill
