"""format_reward, accuracy_reward, math_format_reward and math_boxed_reward."""

import pytest

from trinity.rewards import REWARD_FNS
from trinity.rewards.format import accuracy_reward, format_reward
from trinity.rewards.math import boxed_answer, math_boxed_reward, math_format_reward


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>2 + 2 is 4</think><answer>4</answer>", 1.0),
        ("  <think>a\nb</think>\n<answer>4</answer>\n", 1.0),
        ("<answer>4</answer>", 0.0),  # no reasoning block
        ("<think>x</think><answer>4</answer> and more", 0.0),  # text after the answer
        ("<answer>4</answer><think>x</think>", 0.0),  # wrong order
        ("4", 0.0),
    ],
)
def test_format_reward(response, expected):
    assert format_reward(response, "4") == {"format": expected}


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("<answer> Paris. </answer>", "paris", 1.0),
        ("<answer>London</answer>", "Paris", 0.0),
        ("<answer>1/2</answer>", "0.5", 1.0),  # same value by math-verify
        ("<answer>\\frac{2}{4}</answer>", "\\frac{1}{2}", 1.0),
        ("Paris", "Paris", 1.0),  # no tags: the whole response
        ("I think <answer>3</answer>, no, <answer>4</answer>", "4", 1.0),  # last block
        ("<answer></answer>", "4", 0.0),
    ],
)
def test_accuracy_reward(response, truth, expected):
    assert accuracy_reward(response, truth) == {"accuracy": expected}


def test_math_format_reward_adds_a_signed_format_bonus():
    assert math_format_reward("<think>2+2</think><answer>4</answer>", "4") == {
        "accuracy": 1.0,
        "format": 0.1,
    }
    assert math_format_reward("it is 4", "4") == {"accuracy": 1.0, "format": -0.1}


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("so \\boxed{\\frac{\\sqrt{4}}{4}}", 1.0),  # nested braces; sqrt(4)/4 = 1/2
        ("\\boxed{3} then \\boxed{0.5}", 1.0),  # the last box counts
        ("the answer is 0.5", 0.0),  # a bare number does not count here
        ("\\boxed{0.5", 0.0),  # unclosed
    ],
)
def test_math_boxed_reward(response, expected):
    assert math_boxed_reward(response, "1/2") == {"accuracy": expected}


def test_boxed_answer_takes_the_last_complete_box():
    assert boxed_answer("\\boxed{1} and \\boxed{2") == "1"
    assert boxed_answer("none") is None


def test_every_builtin_is_registered():
    for name in (
        "math_reward",
        "math_format_reward",
        "math_boxed_reward",
        "format_reward",
        "accuracy_reward",
        "countdown_reward",
    ):
        assert callable(REWARD_FNS.get(name))
