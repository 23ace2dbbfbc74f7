"""DAPO's dynamic sampling and RAFT's best-of-group selection on hand-built groups."""

from __future__ import annotations

import pytest
import torch

from trinity.explorer.best_of_group import keep_best_of_group
from trinity.explorer.dynamic_sampling import fill_groups
from trinity.pipeline.groups import is_tied
from trinity.types import EID, Experience


def exp(task: int, run: int, reward: float, batch: int = 1, **metrics: float) -> Experience:
    return Experience(
        tokens=torch.tensor([1, 2, 3, 4]),
        prompt_length=2,
        reward=reward,
        eid=EID(batch=batch, task=task, run=run),
        metrics=dict(metrics),
    )


def group(task: int, *rewards: float) -> list[Experience]:
    return [exp(task, run, r) for run, r in enumerate(rewards)]


def rounds_of(*batches: list[Experience]):
    """A roll_out that hands out ``batches`` one per round, then None (exhausted)."""
    calls = []

    def roll_out(round_: int) -> list[Experience] | None:
        calls.append(round_)
        return batches[round_] if round_ < len(batches) else None

    return roll_out, calls


def test_tied_groups_are_dropped_and_the_step_refilled() -> None:
    # round 0: task 0 (1, 0) kept, task 1 (0, 0) tied
    # round 1: task 2 (1, 1) tied, task 3 (0, 1) kept -> 2 groups: full, no round 2
    roll_out, calls = rounds_of(
        group(0, 1.0, 0.0) + group(1, 0.0, 0.0),
        group(2, 1.0, 1.0) + group(3, 0.0, 1.0),
        group(4, 0.0, 1.0) + group(5, 1.0, 0.0),
    )
    fill = fill_groups(roll_out, batch_size=2, max_extra_rounds=4)
    assert calls == [0, 1]
    assert [e.eid.task for e in fill.experiences] == [0, 0, 3, 3]
    assert (fill.rounds, fill.kept_groups, fill.dropped_groups) == (2, 2, 2)
    assert fill.surplus_groups == 0
    assert len(fill.sampled) == 8  # every rollout of both rounds


def test_extra_rounds_are_bounded() -> None:
    # every group ties: 1 + 2 rounds, then the first tied group fills the one place
    roll_out, calls = rounds_of(*[group(i, 0.0, 0.0) for i in range(10)])
    fill = fill_groups(roll_out, batch_size=1, max_extra_rounds=2)
    assert calls == [0, 1, 2]
    assert [e.eid.task for e in fill.experiences] == [0, 0]
    assert (fill.rounds, fill.dropped_groups, fill.exhausted) == (3, 3, False)
    assert (fill.kept_groups, fill.topped_up_groups) == (0, 1)


def test_a_step_short_after_the_last_round_is_topped_up_with_tied_groups() -> None:
    # round 0: task 0 (1, 0) kept, task 1 (0, 0) tied; round 1: task 2 (1, 1) tied,
    # task 3 (0.5, 0.5) tied. 3 places: task 0, then tied tasks 1 and 2 in the order
    # they came; task 3 is left out
    roll_out, calls = rounds_of(
        group(0, 1.0, 0.0) + group(1, 0.0, 0.0),
        group(2, 1.0, 1.0) + group(3, 0.5, 0.5),
    )
    fill = fill_groups(roll_out, batch_size=3, max_extra_rounds=1)
    assert calls == [0, 1]
    assert [e.eid.task for e in fill.experiences] == [0, 0, 1, 1, 2, 2]
    assert (fill.kept_groups, fill.dropped_groups, fill.topped_up_groups) == (1, 3, 2)


def test_groups_beyond_the_batch_are_surplus_and_exhaustion_stops() -> None:
    # round 0 keeps 1 of 2; round 1 holds 2 untied groups but 1 place is left
    roll_out, _ = rounds_of(
        group(0, 1.0, 0.0) + group(1, 2.0, 2.0),
        group(2, 0.0, 0.5) + group(3, 0.5, 0.0),
    )
    fill = fill_groups(roll_out, batch_size=2, max_extra_rounds=5)
    assert [e.eid.task for e in fill.experiences] == [0, 0, 2, 2]
    assert (fill.dropped_groups, fill.surplus_groups) == (1, 1)
    # the taskset ends after one tied group: it is all the step gets
    roll_out, _ = rounds_of(group(0, 1.0, 1.0))
    fill = fill_groups(roll_out, batch_size=2, max_extra_rounds=5)
    assert (fill.rounds, fill.exhausted, fill.topped_up_groups) == (1, True, 1)
    assert [e.eid.task for e in fill.experiences] == [0, 0]


def test_metric_key_compares_a_reward_component() -> None:
    # rewards differ only by the overlong penalty; accuracy ties at -1: the group is tied
    members = [
        exp(0, 0, -1.0, **{"reward/accuracy": -1.0}),
        exp(0, 1, -1.5, **{"reward/accuracy": -1.0}),
    ]
    assert not is_tied(members)
    assert is_tied(members, metric_key="accuracy")
    with pytest.raises(KeyError, match="format_score"):
        is_tied(members, metric_key="format_score")


def test_a_group_of_one_is_tied() -> None:
    assert is_tied(group(0, 0.7))


def test_best_of_group_masks_all_but_the_best() -> None:
    # group 0: 0.2, 1.0, 1.0, 0.0 -> runs 1 and 2 kept; group 1: all 0 -> masked whole
    exps = group(0, 0.2, 1.0, 1.0, 0.0) + group(1, 0.0, 0.0)
    assert keep_best_of_group(exps) == 4
    kept = [bool(e.action_mask.any()) for e in exps]
    assert kept == [False, True, True, False, False, False]


@pytest.mark.parametrize(
    ("algorithm_type", "sampling", "batches"),
    [
        ("grpo", {}, 3),  # one batch per step
        ("dapo", {}, 3 * (1 + 4)),  # on by default for dapo, 4 extra rounds
        ("dapo", {"max_extra_rounds": 1}, 3 * 2),
        ("dapo", {"enable": False}, 3),
    ],
)
def test_the_training_stream_holds_the_batches_extra_rounds_read(
    tmp_path, algorithm_type: str, sampling: dict, batches: int
) -> None:
    # without the extra batches the taskset would end after total_steps batches, and the
    # run with it, while dynamic sampling's rounds had read ahead
    from datetime import datetime

    from trinity.config.derived import resolve
    from trinity.config.loader import config_from_dict
    from trinity.explorer.explorer import training_batches

    config = config_from_dict(
        {
            "checkpoint_root_dir": str(tmp_path),
            "algorithm": {
                "algorithm_type": algorithm_type,
                "repeat_times": 2,
                "dynamic_sampling": sampling,
            },
            "model": {"model_path": "tiny-model", "max_model_len": 64},
            "buffer": {
                "batch_size": 2,
                "total_steps": 3,
                "explorer_input": {"taskset": {"name": "tasks", "path": "/data/tasks"}},
                "trainer_input": {"experience_buffer": {"name": "exp"}},
            },
        }
    )
    assert training_batches(resolve(config, now=datetime.now())) == batches
