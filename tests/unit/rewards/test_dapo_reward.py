"""DAPO's overlong reward shaping (arXiv:2503.14476, eq. 13) and ``math_dapo_reward``."""

from __future__ import annotations

import pytest

from trinity.rewards.dapo import math_dapo_reward, overlong_penalty


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        (16, 0.0),  # <= L_max - L_cache = 20 - 4: no penalty
        (17, -0.25),  # (16 - 17) / 4
        (18, -0.5),  # (16 - 18) / 4
        (20, -1.0),  # (16 - 20) / 4: the whole buffer
        (21, -1.0),  # past L_max: -penalty_factor
    ],
)
def test_overlong_penalty_by_hand(length: int, expected: float) -> None:
    assert overlong_penalty(length, 20, 4, 1.0) == pytest.approx(expected)


def test_penalty_factor_scales_and_the_buffer_is_checked() -> None:
    assert overlong_penalty(18, 20, 4, 0.5) == pytest.approx(-0.25)  # -0.5 x 0.5
    assert overlong_penalty(30, 20, 4, 0.5) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="cache_length"):
        overlong_penalty(18, 20, 20, 1.0)


def test_math_dapo_reward_components() -> None:
    # right answer, 18 tokens of a 20-token budget with a 4-token buffer: 1 - 0.5
    args = {"max_response_length": 20, "cache_length": 4, "enable_overlong_penalty": True}
    right = math_dapo_reward("So the answer is 7", "7", response_length=18, **args)
    assert right == {"accuracy": 1.0, "format_score": pytest.approx(-0.5)}
    wrong = math_dapo_reward("It is 8", "7", response_length=10, **args)
    assert wrong == {"accuracy": -1.0, "format_score": 0.0}
    assert math_dapo_reward("7", "7") == {"accuracy": 1.0, "format_score": 0.0}
    with pytest.raises(ValueError, match="response's length"):
        math_dapo_reward("7", "7", **args)
