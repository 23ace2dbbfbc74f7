"""DAPO's experience operators, ``dapo_dynamic_sampling`` and ``mask_response_truncated``,
against hand-counted groups and masks."""

from __future__ import annotations

import pytest
import torch

from trinity.pipeline import EXPERIENCE_OPERATORS, ExperiencePipeline, OperatorError, build_operator
from trinity.types import EID, Experience


def exp(task: str, run: int, reward: float | None, **fields) -> Experience:
    return Experience(
        tokens=torch.tensor([1, 2, 3, 4]),  # prompt of 1, response of 3
        prompt_length=1,
        reward=reward,
        eid=EID(batch=0, task=task, run=run),
        **fields,
    )


def scored(task: str, run: int, accuracy: float, penalty: float = 0.0) -> Experience:
    """A rollout scored by math_dapo_reward: reward = accuracy + overlong penalty, each
    component stored as the workflow stores it (``reward/<name>``)."""
    metrics = {"reward/accuracy": accuracy, "reward/format_score": penalty}
    return exp(task, run, accuracy + penalty, metrics=metrics)


def op(name: str, **args):
    return build_operator(EXPERIENCE_OPERATORS, {"name": name, "args": args})


def test_dynamic_sampling_keeps_groups_with_some_right_and_some_wrong() -> None:
    exps = [
        scored("a", 0, 1.0),
        scored("a", 1, -1.0),  # a: 1 of 2 right: kept
        scored("b", 0, -1.0),
        scored("b", 1, -1.0, penalty=-0.5),  # b: 0 of 2 right (rewards -1, -1.5): dropped
        scored("c", 0, 1.0),
        scored("c", 1, 1.0),  # c: 2 of 2 right: dropped
        scored("d", 0, 1.0),  # d: a group of one always ties: dropped
        scored("e", 0, -1.0),
        scored("e", 1, 1.0, penalty=-0.25),
        scored("e", 2, -1.0),  # e: 1 of 3 right: kept
    ]
    kept, metrics = op("dapo_dynamic_sampling").process(exps)
    assert [(e.eid.task, e.eid.run) for e in kept] == [
        ("a", 0),
        ("a", 1),
        ("e", 0),
        ("e", 1),
        ("e", 2),
    ]
    assert metrics == {
        "dapo_dynamic_sampling/dropped_groups": 3.0,  # b, c, d
        "dapo_dynamic_sampling/dropped": 5.0,  # 2 + 2 + 1
        "dapo_dynamic_sampling/dropped_all_correct": 3.0,  # c's 2 and d's 1
        "dapo_dynamic_sampling/dropped_all_wrong": 2.0,  # b's 2
    }
    # b's rewards differ (-1 vs -1.5), so a filter on the reward would have kept it
    _, flat = op("zero_variance_filter").process(exps)
    assert flat["zero_variance_filter/dropped_groups"] == 2.0  # c and d only


def test_dynamic_sampling_threshold_and_a_plain_metric_name() -> None:
    exps = [
        exp("a", 0, 0.0, metrics={"score": 0.3}),
        exp("a", 1, 0.0, metrics={"score": 0.7}),  # a: 0.7 > 0.5 only: kept
        exp("b", 0, 0.0, metrics={"score": 0.2}),
        exp("b", 1, 0.0, metrics={"score": 0.5}),  # b: 0.5 is not above 0.5: all wrong
    ]
    kept, metrics = op("dapo_dynamic_sampling", metric_key="score", correct_threshold=0.5).process(
        exps
    )
    assert [e.eid.task for e in kept] == ["a", "a"]
    assert metrics["dapo_dynamic_sampling/dropped_all_wrong"] == 2.0
    # threshold 0.25 (an int works too): a is all right (0.3, 0.7), b mixed (0.2, 0.5)
    kept, metrics = op("dapo_dynamic_sampling", metric_key="score", correct_threshold=0.25).process(
        exps
    )
    assert [e.eid.task for e in kept] == ["b", "b"]
    assert metrics["dapo_dynamic_sampling/dropped_all_correct"] == 2.0


def test_dynamic_sampling_falls_back_to_the_reward() -> None:
    # a rollout whose reward function raised has reward 0 and no accuracy: it is wrong
    errored = exp("a", 1, 0.0, info={"reward_error": "VerifyTimeout: 5 s"})
    kept, _ = op("dapo_dynamic_sampling").process([scored("a", 0, 1.0), errored])
    assert len(kept) == 2  # right and wrong: kept
    # no component at all: the rewards 0.5 and 0.0 against threshold 0
    kept, metrics = op("dapo_dynamic_sampling").process([exp("b", 0, 0.5), exp("b", 1, 0.0)])
    assert len(kept) == 2 and metrics["dapo_dynamic_sampling/dropped"] == 0.0
    with pytest.raises(OperatorError, match="no metric 'accuracy' and no reward"):
        op("dapo_dynamic_sampling").process([exp("c", 0, None)])


@pytest.mark.parametrize(
    ("args", "key"),
    [
        ({"correct_threshold": "high"}, "correct_threshold"),
        ({"correct_threshold": True}, "correct_threshold"),
        ({"correct_threshold": float("nan")}, "correct_threshold"),
        ({"metric_key": ""}, "metric_key"),
        ({"metric_key": 3}, "metric_key"),
        ({"threshold": 0.5}, "threshold"),  # not an argument: the error lists what it takes
    ],
)
def test_dynamic_sampling_bad_args_name_the_key(args: dict, key: str) -> None:
    with pytest.raises(OperatorError, match=key):
        op("dapo_dynamic_sampling", **args)


def test_mask_response_truncated_zeroes_the_cut_responses() -> None:
    exps = [
        exp("a", 0, 1.0, info={"finish_reason": "length"}),  # stopped at max tokens
        exp("a", 1, 1.0, info={"finish_reason": "stop"}),
        exp("a", 2, 0.0, info={"truncated": True, "turns": 3}),  # conversation at max_model_len
        exp("a", 3, 0.0, info={"truncated": False}),
        exp("a", 4, 0.0, action_mask=torch.tensor([False, True, True])),  # no finish reason
    ]
    out, metrics = op("mask_response_truncated").process(exps)
    assert out == exps  # nothing dropped, same order
    assert metrics == {"mask_response_truncated/masked": 2.0}
    masks = [e.action_mask.tolist() for e in out]
    assert masks == [
        [False, False, False],
        [True, True, True],
        [False, False, False],
        [True, True, True],
        [False, True, True],
    ]
    assert out[0].action_mask.dtype == torch.bool
    assert [e.reward for e in out] == [1.0, 1.0, 0.0, 0.0, 0.0]  # rewards untouched


def test_mask_response_truncated_takes_no_args() -> None:
    with pytest.raises(OperatorError, match="max_length"):
        op("mask_response_truncated", max_length=10)


def test_dapo_example_pipeline() -> None:
    # as examples/dapo_math/dapo.yaml orders them: mask first, then drop tied groups
    pipeline = ExperiencePipeline(
        [{"name": "mask_response_truncated"}, {"name": "dapo_dynamic_sampling"}]
    )
    cut = scored("a", 1, -1.0, penalty=-1.0)
    cut.info["finish_reason"] = "length"
    exps = [scored("a", 0, 1.0), cut, scored("b", 0, -1.0), scored("b", 1, -1.0)]
    kept, metrics = pipeline.process(exps)
    assert kept == exps[:2]
    assert kept[1].action_mask.tolist() == [False, False, False]
    assert metrics["mask_response_truncated/masked"] == 1.0
    assert metrics["dapo_dynamic_sampling/dropped_groups"] == 1.0
    assert metrics["pipeline/kept"] == 2.0 and metrics["pipeline/dropped"] == 2.0
