"""math_reward: the response's stated final answer against the reference answer."""

import threading

import pytest

from trinity.rewards.math import final_answer, math_reward, reference_answer


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("13 + 14 = 27.", "27", 1.0),
        ("13 + 14 = 25.", "27", 0.0),
        ("The sum is 1,234 apples", "1234", 1.0),
        ("The answer is \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("x = 3/4", "0.75", 1.0),
        ("Natalia sold 48 clips ... so 72 in all", "She sold 48/2 = 24 ... #### 72", 1.0),
        ("no number here", "3", 0.0),
        ("-5", "-5", 1.0),
        ("12.0", "12", 1.0),
    ],
)
def test_math_reward(response: str, truth: str, expected: float) -> None:
    assert math_reward(response, truth) == {"accuracy": expected}


def test_restating_the_question_is_not_an_answer() -> None:
    # "9 + 7" evaluates to 16, but the response never states 16: the last number is 7
    response = "9 + 7 is a common question, as in the equation 9 + 7"
    assert final_answer(response) == "7"
    assert math_reward(response, "16") == {"accuracy": 0.0}


def test_boxed_answer_wins_over_later_numbers() -> None:
    assert final_answer("\\boxed{42} (checked in 3 steps)") == "42"


def test_gsm8k_reference_is_reduced_to_final_answer() -> None:
    assert reference_answer("48/2 = 24 clips\n#### 1,072") == "1072"


def test_works_inside_runner_threads() -> None:
    # math-verify's default timeout uses SIGALRM, which fails outside the main thread
    results = []
    thread = threading.Thread(target=lambda: results.append(math_reward("2 + 2 = 4", "4")))
    thread.start()
    thread.join()
    assert results == [{"accuracy": 1.0}]


INTEGER_PAIRS = [("42", "42"), ("042", "42"), ("-3", "-3"), ("+5", "5"), ("7", "8"), ("-0", "0")]


def test_two_integers_are_compared_without_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    from trinity.rewards import math as math_rewards

    def no_worker():
        raise AssertionError("math-verify's worker was asked about two integers")

    monkeypatch.setattr(math_rewards, "default_verifier", no_worker)
    assert [math_rewards.equivalent(a, b) for a, b in INTEGER_PAIRS] == [
        True, True, True, True, False, True,
    ]  # fmt: skip
    assert math_reward("13 + 14 = 27.", "#### 27") == {"accuracy": 1.0}
    with pytest.raises(AssertionError, match="worker"):
        math_rewards.equivalent("0.5", "1/2")  # not two integers: math-verify decides


def test_the_integer_shortcut_agrees_with_math_verify() -> None:
    from trinity.rewards.verifier import MathVerifier

    verifier = MathVerifier(workers=1)
    try:
        verdicts = [verifier.equivalent(a, b, 30.0) for a, b in INTEGER_PAIRS]
    finally:
        verifier.close()
    assert verdicts == [True, True, True, True, False, True]
