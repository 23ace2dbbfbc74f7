"""countdown_reward and the ast evaluator under it: hand-written cases."""

from fractions import Fraction

import pytest

from trinity.rewards.countdown import countdown_reward, countdown_truth, extract_equation
from trinity.rewards.expression import ExpressionError, evaluate

TRUTH = {"numbers": [2, 5, 6], "target": 20}


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<answer>(6 - 2) * 5</answer>", {"format": 0.1, "accuracy": 1.0}),
        (
            "<think>try</think> <answer> 5 * (6 - 2) = 20 </answer>",
            {"format": 0.1, "accuracy": 1.0},
        ),
        # 6 / 2 = 3 exactly; 3 * 5 = 15: well formed but wrong
        ("<answer>6 / 2 * 5</answer>", {"format": 0.1, "accuracy": 0.0}),
        # equals 20 but uses 5 twice (given once)
        ("<answer>5 * 5 - 6 + 2 / 2 * 2 - 1</answer>", {"format": 0.1, "accuracy": 0.0}),
        # 4 is not a given number (4 * 5 = 20)
        ("<answer>4 * 5</answer>", {"format": 0.1, "accuracy": 0.0}),
        # 20 is the target, not a given number
        ("<answer>(2 + 5 - 6) * 20</answer>", {"format": 0.1, "accuracy": 0.0}),
        ("the answer is (6 - 2) * 5", {"format": 0.0, "accuracy": 0.0}),
        ("<answer>__import__('os').system('true')</answer>", {"format": 0.0, "accuracy": 0.0}),
        ("<answer>6 ** 2</answer>", {"format": 0.0, "accuracy": 0.0}),
        ("<answer>5 / (6 - 6)</answer>", {"format": 0.0, "accuracy": 0.0}),
        # the last answer block counts
        (
            "<answer>6 + 5</answer> no wait <answer>(6-2)*5</answer>",
            {"format": 0.1, "accuracy": 1.0},
        ),
    ],
)
def test_countdown_reward(response, expected):
    assert countdown_reward(response, TRUTH) == expected


def test_not_every_number_must_be_used():
    assert (
        countdown_reward("<answer>5 * 6</answer>", {"numbers": [2, 5, 6], "target": 30})["accuracy"]
        == 1.0
    )


def test_division_is_exact():
    # 20 = 5 / (1 - 6/8)? With numbers 1, 5, 6, 8: 1 - 3/4 = 1/4 and 5 / (1/4) = 20
    truth = {"nums": [1, 5, 6, 8], "target": 20}
    assert countdown_reward("<answer>5 / (1 - 6 / 8)</answer>", truth)["accuracy"] == 1.0


def test_truth_as_json_text():
    assert countdown_truth('{"target": 3, "nums": [1, 2]}') == ([1, 2], 3)


@pytest.mark.parametrize("truth", ["24", {"numbers": [1, 2]}, {"target": 3, "numbers": "1 2"}])
def test_bad_truth_is_a_clear_error(truth):
    with pytest.raises(ValueError, match="countdown"):
        countdown_reward("<answer>1 + 2</answer>", truth)


def test_extract_equation_drops_the_stated_result():
    assert extract_equation("<answer>1 + 2 = 3</answer>") == "1 + 2"
    assert extract_equation("no tags") is None


def test_evaluate_reports_literals_and_value():
    expr = evaluate("(8 - 2) * 4 / 3")
    assert expr.value == Fraction(8) and expr.numbers == [8, 2, 4, 3]


@pytest.mark.parametrize(
    "text",
    ["", "x + 1", "1.5 + 2", "-3 + 5", "2 ** 3", "abs(3)", "1 +", "9" * 13, "1+" * 150 + "1"],
)
def test_evaluate_rejects(text):
    with pytest.raises(ExpressionError):
        evaluate(text)


def test_evaluate_negation_when_allowed():
    assert evaluate("-3 + 5", allow_negation=True).value == 2
