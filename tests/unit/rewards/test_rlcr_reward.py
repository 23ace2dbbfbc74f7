"""``rlcr_reward``: RLCR's format, accuracy and Brier calibration components (arXiv:2507.16806),
against numbers worked out by hand."""

from __future__ import annotations

import pytest

from trinity.rewards import REWARD_FNS
from trinity.rewards.registry import RewardArgsError, task_reward_fn
from trinity.rewards.rlcr import closing_blocks, rlcr_reward, stated_confidence
from trinity.types import Task

COMPONENTS = ["format", "accuracy", "brier", "mean_confidence", "confidence_one_or_zero"]
PAPER = {  # accuracy + brier = c + 1 - (c - q)^2: the paper's reward plus 1
    "format": 0.0,
    "accuracy": 1.0,
    "brier": 1.0,
    "mean_confidence": 0.0,
    "confidence_one_or_zero": 0.0,
}


def reply(answer: str, confidence: str, before: str = "", after: str = "", gap: str = "") -> str:
    return (
        f"{before}<think>adding</think>{gap}<answer>{answer}</answer>{gap}"
        f"<analysis>checked twice</analysis>{gap}<confidence>{confidence}</confidence>{after}"
    )


def approx(components: dict[str, float]) -> dict[str, object]:
    return {name: pytest.approx(value, abs=1e-12) for name, value in components.items()}


def test_registered_under_trinity_rfts_name() -> None:
    assert REWARD_FNS.get("rlcr_reward") is rlcr_reward


@pytest.mark.parametrize(
    ("answer", "q", "expected"),
    [
        # right, q 0.8: brier 0.5 * (1 - (1 - 0.8)^2) = 0.5 * 0.96 = 0.48; mean 1e-5 * 0.8
        ("7", "0.8", [0.5, 0.5, 0.48, 8e-6, 0.0]),
        # wrong, q 0.8: brier 0.5 * (1 - (0 - 0.8)^2) = 0.5 * 0.36 = 0.18
        ("8", "0.8", [0.5, 0.0, 0.18, 8e-6, 0.0]),
        # wrong, q 0 (< 0.01): brier 0.5 * (1 - 0) = 0.5; one_or_zero 1e-5; mean 0
        ("8", "0", [0.5, 0.0, 0.5, 0.0, 1e-5]),
        # right, q 1 (> 0.99): brier 0.5; both confidence statistics 1e-5
        ("7", "1.0", [0.5, 0.5, 0.5, 1e-5, 1e-5]),
        # right, q 0.25: brier 0.5 * (1 - 0.75^2) = 0.5 * 0.4375 = 0.21875
        (" 7 ", " 0.25 ", [0.5, 0.5, 0.21875, 2.5e-6, 0.0]),
    ],
)
def test_default_weights_by_hand(answer: str, q: str, expected: list[float]) -> None:
    got = rlcr_reward(reply(answer, q), "7")
    assert got == approx(dict(zip(COMPONENTS, expected, strict=True)))


@pytest.mark.parametrize(
    ("answer", "q", "paper_reward"),
    [
        ("7", "0.8", 1 - 0.2**2),  # c = 1: 1 - (0.8 - 1)^2 = 0.96
        ("8", "0.3", -(0.3**2)),  # c = 0: 0 - 0.3^2 = -0.09
        ("8", "1", -1.0),  # sure and wrong: the worst
        ("7", "1", 1.0),  # sure and right: the best
    ],
)
def test_accuracy_plus_brier_is_the_papers_reward_plus_one(
    answer: str, q: str, paper_reward: float
) -> None:
    got = rlcr_reward(reply(answer, q), "7", weights=PAPER)
    assert sum(got.values()) == pytest.approx(paper_reward + 1.0)


@pytest.mark.parametrize(
    "response",
    [
        reply("7", "0.8", after=" Done."),  # text after </confidence>
        reply("7", "0.8", gap=" so "),  # text between the blocks
        "<think>adding</think><answer>7</answer><confidence>0.8</confidence>",  # no analysis
        "<answer>7</answer><think>adding</think><analysis>ok</analysis>"
        "<confidence>0.8</confidence>",  # out of order
        reply("7", "0.8", before="<think>a <answer>6</answer></think> "),  # a block inside one
        reply("7", "0.8", before="</think>"),  # a close without its open
        reply("7", "0.8", after="<think>"),  # left open
    ],
)
def test_a_broken_chain_scores_no_format_accuracy_or_brier(response: str) -> None:
    got = rlcr_reward(response, "7")
    assert (got["format"], got["accuracy"], got["brier"]) == (0.0, 0.0, 0.0)


def test_confidence_statistics_read_the_last_block_even_without_the_format() -> None:
    # text after the chain breaks the format; the last <confidence> still says 0.8
    got = rlcr_reward(reply("7", "0.8", after=" Done."), "7")
    assert got["mean_confidence"] == pytest.approx(8e-6)
    assert stated_confidence("<confidence>0.3</confidence> then <confidence>0.9") is None
    assert stated_confidence("no tags") is None
    assert stated_confidence("<confidence><answer>1</answer></confidence>") is None


@pytest.mark.parametrize("q", ["1.5", "-0.1", "nan", "inf", "high", ""])
def test_a_confidence_outside_0_1_breaks_the_format(q: str) -> None:
    got = rlcr_reward(reply("7", q), "7")
    assert got == {name: 0.0 for name in COMPONENTS}


def test_what_may_come_before_and_between_the_closing_blocks() -> None:
    spaced = reply("7", "0.8", before="Let me see.\n", gap="\n  ", after="\n")
    earlier = reply("7", "0.8", before="<think>first try</think> and again ")
    for response in (spaced, earlier):
        got = rlcr_reward(response, "7")
        assert (got["format"], got["accuracy"]) == (0.5, 0.5)
    assert closing_blocks(earlier) == {
        "think": "adding",
        "answer": "7",
        "analysis": "checked twice",
        "confidence": "0.8",
    }


def test_answers_are_checked_with_math_verify() -> None:
    # 1/2 = 0.5 needs math-verify (not two integers); a GSM8K reference is cut at ####
    got = rlcr_reward(reply("\\frac{1}{2}", "0.6"), "half of it #### 0.5")
    assert got["accuracy"] == 0.5
    assert got["brier"] == pytest.approx(0.5 * (1 - 0.4**2))  # 0.42


def test_answer_parser_and_verifier() -> None:
    seen = []

    def verifier(answer: str, reference: str) -> bool:
        seen.append((answer, reference))
        return answer == reference

    got = rlcr_reward(reply("Paris", "0.9"), "PARIS", answer_parser=str.lower, verifier=verifier)
    assert seen == [("paris", "paris")]  # the parser reads the answer and the reference
    assert got["accuracy"] == 0.5
    assert got["brier"] == pytest.approx(0.5 * (1 - 0.1**2))  # 0.495


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ({"weights": {"format": 1.0}}, ValueError, r"missing \['accuracy', 'brier'"),
        ({"weights": {**PAPER, "calibration": 1.0}}, ValueError, r"unknown \['calibration'\]"),
        ({"weights": {**PAPER, "brier": "high"}}, ValueError, "weights.brier"),
        ({"weights": {**PAPER, "format": True}}, ValueError, "weights.format"),
        ({"weights": {**PAPER, "accuracy": float("inf")}}, ValueError, "weights.accuracy"),
        ({"weights": [0.5, 0.5]}, TypeError, "weights must map format"),
        ({"verifier": "math_verify"}, TypeError, "verifier must be a Python callable"),
        ({"answer_parser": 3}, TypeError, "answer_parser must be a Python callable"),
    ],
)
def test_bad_args_name_the_key(args: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        rlcr_reward(reply("7", "0.8"), "7", **args)


def test_the_examples_reward_fn_args_bind() -> None:
    example = {  # examples/rlcr_math/rlcr_math.yaml of Trinity-RFT
        "weights": {
            "format": 0.5,
            "accuracy": 0.5,
            "brier": 0.5,
            "mean_confidence": 1.0e-5,
            "confidence_one_or_zero": 1.0e-5,
        }
    }
    task = Task(raw={}, workflow="math_workflow", reward_fn="rlcr_reward", reward_fn_args=example)
    fn = task_reward_fn(task, "math_reward")
    assert fn(reply("7", "0.8"), "7") == rlcr_reward(reply("7", "0.8"), "7")
    task.reward_fn_args = {"weight": {"format": 1.0}}
    with pytest.raises(RewardArgsError, match=r"\['weight'\]"):
        task_reward_fn(task, "math_reward")
