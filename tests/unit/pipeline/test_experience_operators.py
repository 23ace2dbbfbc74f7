"""Experience operators and the experience pipeline, against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from trinity.pipeline import (
    EXPERIENCE_OPERATORS,
    ExperienceOperator,
    ExperiencePipeline,
    OperatorError,
    build_operator,
)
from trinity.types import EID, Experience
from trinity.utils.registry import UnknownNameError


def exp(task: int | str, run: int, reward: float | None, **fields) -> Experience:
    return Experience(
        tokens=torch.tensor([1, 2, 3]),
        prompt_length=1,
        reward=reward,
        eid=EID(batch=0, task=task, run=run),
        **fields,
    )


def rewards(exps: list[Experience]) -> list[float | None]:
    return [e.reward for e in exps]


def shaping(*configs: dict) -> ExperienceOperator:
    return build_operator(
        EXPERIENCE_OPERATORS,
        {"name": "reward_shaping_mapper", "args": {"reward_shaping_configs": list(configs)}},
    )


@pytest.mark.parametrize(
    ("op_type", "weight", "expected"),
    [
        ("ADD", 0.5, 1.2),  # 1.0 + 0.5 * 0.4
        ("SUB", 0.5, 0.8),  # 1.0 - 0.5 * 0.4
        ("MUL", 2.0, 0.8),  # 1.0 * (2.0 * 0.4)
        ("DIV", 2.0, 1.25),  # 1.0 / (2.0 * 0.4)
    ],
)
def test_reward_shaping_each_op(op_type: str, weight: float, expected: float) -> None:
    op = shaping({"stats_key": "quality", "op_type": op_type, "weight": weight})
    out, metrics = op.process([exp(0, 0, 1.0, info={"quality": 0.4})])
    assert out[0].reward == pytest.approx(expected)
    assert metrics["reward_shaping/delta_mean"] == pytest.approx(expected - 1.0)


def test_reward_shaping_chains_in_order_and_reads_metrics() -> None:
    op = shaping(
        {"stats_key": "quality", "op_type": "ADD", "weight": 1.0},
        {"stats_key": "length_penalty", "op_type": "mul", "weight": 2.0},
    )
    # (0.5 + 1.0 * 0.25) * (2.0 * 0.5) = 0.75 ; quality from info, length_penalty from metrics
    e = exp(0, 0, 0.5, info={"quality": 0.25}, metrics={"length_penalty": 0.5, "quality": 9.0})
    [out], _ = op.process([e])
    assert out.reward == pytest.approx(0.75)


def test_reward_shaping_errors() -> None:
    with pytest.raises(OperatorError, match="unknown op_type 'POW'"):
        shaping({"stats_key": "q", "op_type": "POW"})
    with pytest.raises(OperatorError, match="needs stats_key"):
        shaping({"op_type": "ADD"})
    op = shaping({"stats_key": "quality"})
    with pytest.raises(OperatorError, match=r"no stats_key 'quality' in info \(keys \['other'\]\)"):
        op.process([exp(0, 0, 1.0, info={"other": 1})])
    with pytest.raises(OperatorError, match="no reward to shape"):
        op.process([exp(0, 0, None, info={"quality": 1})])
    div = shaping({"stats_key": "quality", "op_type": "DIV"})
    with pytest.raises(OperatorError, match="DIV by weight \\* quality = 0"):
        div.process([exp(0, 0, 1.0, info={"quality": 0})])


def test_invalid_reward_filter() -> None:
    batch = [
        exp(0, 0, 1.0),
        exp(0, 1, None),
        exp(1, 0, math.nan),
        exp(1, 1, math.inf),
        exp(2, 0, 0.0),
    ]
    op = build_operator(EXPERIENCE_OPERATORS, {"name": "invalid_reward_filter"})
    out, metrics = op.process(batch)
    assert [(e.eid.task, e.eid.run) for e in out] == [(0, 0), (2, 0)]
    assert metrics == {"invalid_reward_filter/dropped": 3.0}
    whole = build_operator(
        EXPERIENCE_OPERATORS, {"name": "invalid_reward_filter", "args": {"drop_group": True}}
    )
    out, metrics = whole.process(batch)
    assert [(e.eid.task, e.eid.run) for e in out] == [(2, 0)]  # groups 0 and 1 had a bad run
    assert metrics == {"invalid_reward_filter/dropped": 4.0}


def test_zero_variance_filter_drops_flat_groups() -> None:
    batch = [exp(0, 0, 1.0), exp(0, 1, 1.0), exp(1, 0, 0.0), exp(1, 1, 1.0), exp(2, 0, 0.5)]
    out, metrics = build_operator(EXPERIENCE_OPERATORS, {"name": "zero_variance_filter"}).process(
        batch
    )
    # group 0: rewards 1, 1 (flat); group 1: 0, 1 (kept); group 2: a single run (flat)
    assert [(e.eid.task, e.eid.run) for e in out] == [(1, 0), (1, 1)]
    assert metrics == {
        "zero_variance_filter/dropped_groups": 2.0,
        "zero_variance_filter/dropped": 3.0,
    }
    tolerant = build_operator(
        EXPERIENCE_OPERATORS, {"name": "zero_variance_filter", "args": {"atol": 1e-3}}
    )
    out, _ = tolerant.process([exp(0, 0, 0.5), exp(0, 1, 0.5005), exp(1, 0, 0.0), exp(1, 1, 0.1)])
    assert [e.eid.task for e in out] == [1, 1]  # |0.5 - 0.5005| <= 1e-3 counts as flat


def test_reward_filter_keeps_rewards_at_or_above_the_threshold() -> None:
    batch = [exp(0, 0, 0.5), exp(0, 1, 0.49), exp(1, 0, None), exp(1, 1, math.nan), exp(2, 0, 1.0)]
    op = build_operator(EXPERIENCE_OPERATORS, {"name": "reward_filter", "args": {"threshold": 0.5}})
    out, metrics = op.process(batch)
    # 0.5 >= 0.5 kept, 0.49 dropped; a missing or NaN reward is not >= anything
    assert [(e.eid.task, e.eid.run) for e in out] == [(0, 0), (2, 0)]
    assert metrics == {"reward_filter/dropped": 3.0}
    # threshold 0 (upstream's default) drops negative rewards only
    out, _ = build_operator(EXPERIENCE_OPERATORS, {"name": "reward_filter"}).process(
        [exp(0, 0, -0.1), exp(0, 1, 0.0)]
    )
    assert rewards(out) == [0.0]


def test_reward_std_filter_keeps_groups_whose_std_passes_the_threshold() -> None:
    batch = [
        exp(0, 0, 0.0), exp(0, 1, 1.0),  # population std 0.5
        exp(1, 0, 0.4), exp(1, 1, 0.6),  # std 0.1
        exp(2, 0, 1.0), exp(2, 1, 1.0), exp(2, 2, 1.0),  # std 0
        exp(3, 0, 0.0),  # a group of one: no spread to measure
        exp(4, 0, 0.0), exp(4, 1, None),  # an unscored run: std unknown
    ]  # fmt: skip
    op = build_operator(
        EXPERIENCE_OPERATORS, {"name": "reward_std_filter", "args": {"threshold": 0.1}}
    )
    out, metrics = op.process(batch)
    # only group 0: 0.5 > 0.1; group 1's 0.1 is not above 0.1
    assert [(e.eid.task, e.eid.run) for e in out] == [(0, 0), (0, 1)]
    assert metrics == {"reward_std_filter/dropped_groups": 4.0, "reward_std_filter/dropped": 8.0}
    # threshold 0 (upstream's default) keeps every group with any spread
    out, _ = build_operator(EXPERIENCE_OPERATORS, {"name": "reward_std_filter"}).process(batch)
    assert [e.eid.task for e in out] == [0, 0, 1, 1]


def test_groups_are_per_batch_and_task() -> None:
    a = Experience(
        tokens=torch.tensor([1, 2]), prompt_length=1, reward=1.0, eid=EID(batch=0, task=0)
    )
    b = Experience(
        tokens=torch.tensor([1, 2]), prompt_length=1, reward=0.0, eid=EID(batch=1, task=0)
    )
    out, _ = build_operator(EXPERIENCE_OPERATORS, {"name": "zero_variance_filter"}).process([a, b])
    assert out == []  # two groups of one, not one group of two


def test_pass_rate_stats() -> None:
    batch = [
        exp("a", 0, 1.0), exp("a", 1, 1.0),  # all correct
        exp("b", 0, 0.0), exp("b", 1, 0.5),  # none reaches the threshold 1.0
        exp("c", 0, 1.0), exp("c", 1, 0.0), exp("c", 2, 1.0),  # mixed, 2/3
    ]  # fmt: skip
    op = build_operator(EXPERIENCE_OPERATORS, {"name": "pass_rate_stats"})
    out, m = op.process(batch)
    assert out == batch
    assert m["pass_rate/groups"] == 3.0
    assert m["pass_rate/all_correct"] == pytest.approx(1 / 3)
    assert m["pass_rate/none_correct"] == pytest.approx(1 / 3)
    assert m["pass_rate/mixed"] == pytest.approx(1 / 3)
    assert m["pass_rate/mean"] == pytest.approx((1 + 0 + 2 / 3) / 3)
    by_metric = build_operator(
        EXPERIENCE_OPERATORS,
        {"name": "pass_rate_stats", "args": {"key": "accuracy", "threshold": 0.5}},
    )
    _, m = by_metric.process(
        [exp(0, 0, 0.0, metrics={"accuracy": 0.5}), exp(0, 1, 9.0, metrics={"accuracy": 0.0})]
    )
    assert m["pass_rate/mixed"] == 1.0 and m["pass_rate/mean"] == 0.5


def test_pass_rate_calculator_reports_upstreams_selection_fractions() -> None:
    # task pass rates (mean reward): A 1, B 0, C 0.5, D 1/16 (1 of 16 runs), E 0.25
    # (its unscored run left out)
    batch = (
        [exp("A", r, 1.0) for r in range(2)]
        + [exp("B", r, 0.0) for r in range(2)]
        + [exp("C", 0, 1.0), exp("C", 1, 0.0)]
        + [exp("D", r, 1.0 if r == 0 else 0.0) for r in range(16)]
        + [exp("E", 0, 0.5), exp("E", 1, 0.0), exp("E", 2, None)]
    )
    op = build_operator(EXPERIENCE_OPERATORS, {"name": "pass_rate_calculator"})
    out, m = op.process(batch)
    assert len(out) == len(batch) and all(a is b for a, b in zip(out, batch, strict=True))
    assert m == {
        "selection/valid_ratio": 3 / 5,  # C, D, E
        "selection/strict_valid_ratio": 2 / 5,  # C, E: D's 1/16 is not above 1/16 + 1e-3
        "selection/<1_ratio": 4 / 5,  # all but A
        "selection/>0_ratio": 4 / 5,  # all but B
        "selection/<15_16_ratio": 4 / 5,  # all but A
        "selection/>1_16_ratio": 3 / 5,  # A, C, E
    }
    assert op.process([exp("F", 0, None)])[1] == {}  # no scored run: no metrics


def test_pipeline_applies_operators_in_order() -> None:
    batch = (
        [exp("A", r, 1.0) for r in range(3)]
        + [exp("B", r, 0.0) for r in range(2)]
        + [exp("C", 0, 1.0), exp("C", 1, 0.0), exp("C", 2, 1.0)]
        + [exp("D", 0, 1.0), exp("D", 1, None), exp("D", 2, math.nan)]
    )
    pipeline = ExperiencePipeline(
        [
            {"name": "pass_rate_stats"},
            {"name": "invalid_reward_filter"},
            {"name": "zero_variance_filter"},
        ]
    )
    out, m = pipeline.process(batch)
    assert [e.eid.group for e in out] == ["0/C"] * 3
    # pass rates over all 4 groups: A 1, B 0, C 2/3, D 1 (its unscored runs left out)
    assert m["pass_rate/all_correct"] == 0.5 and m["pass_rate/none_correct"] == 0.25
    assert m["pass_rate/mean"] == pytest.approx((1 + 0 + 2 / 3 + 1) / 4)
    assert m["invalid_reward_filter/dropped"] == 2.0
    # then A (3 runs), B (2) and what is left of D (1) are flat
    assert m["zero_variance_filter/dropped_groups"] == 3.0
    assert m["zero_variance_filter/dropped"] == 6.0
    assert m["pipeline/kept"] == 3.0 and m["pipeline/dropped"] == 8.0
    assert ExperiencePipeline([]).process(batch) == (batch, {})


class DoubleReward(ExperienceOperator):
    """A user operator, found by its dotted path."""

    def __init__(self, factor: float = 2.0) -> None:
        self.factor = factor

    def process(self, exps):
        for e in exps:
            e.reward *= self.factor
        return exps, {}


def test_user_operator_by_dotted_path_and_config_errors() -> None:
    pipeline = ExperiencePipeline([{"name": f"{__name__}.DoubleReward", "args": {"factor": 3.0}}])
    out, _ = pipeline.process([exp(0, 0, 0.5)])
    assert out[0].reward == 1.5
    with pytest.raises(UnknownNameError, match="did you mean 'zero_variance_filter'"):
        ExperiencePipeline([{"name": "zero_varaince_filter"}])
    with pytest.raises(OperatorError, match=r"'zero_variance_filter': bad args \['tol'\]"):
        ExperiencePipeline([{"name": "zero_variance_filter", "args": {"tol": 1}}])
