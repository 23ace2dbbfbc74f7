"""``countdown_reward``: is the stated equation made of the given numbers and equal to the target?

The task gives numbers and a target; the response must state an arithmetic expression
inside ``<answer>...</answer>`` (the last such block counts; a trailing ``= target`` is
allowed). The expression is evaluated exactly with :mod:`trinity.rewards.expression`
(never ``eval``) and may use each given number at most once.

Components: ``format`` is 0.1 when the answer is a well-formed expression, and
``accuracy`` is 1.0 when it also uses only the given numbers and equals the target.

    >>> countdown_reward("<answer>(6 - 2) * 5</answer>", {"numbers": [2, 5, 6], "target": 20})
    {'format': 0.1, 'accuracy': 1.0}
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from trinity.rewards.expression import ExpressionError, evaluate
from trinity.rewards.registry import REWARD_FNS

FORMAT_SCORE = 0.1
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def countdown_truth(truth: Any) -> tuple[list[int], int]:
    """The numbers and target of a countdown task.

    Accepts a mapping (or its JSON text) with ``target`` and ``numbers`` (or ``nums``).
    """
    if isinstance(truth, str):
        try:
            truth = json.loads(truth)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"countdown truth must be a mapping or JSON object with 'numbers' and "
                f"'target', got {truth!r}"
            ) from exc
    if not isinstance(truth, Mapping) or "target" not in truth:
        raise ValueError(
            f"countdown truth must have 'numbers' (or 'nums') and 'target', got {truth!r}"
        )
    numbers = truth.get("numbers", truth.get("nums"))
    if not isinstance(numbers, list | tuple) or not all(isinstance(n, int) for n in numbers):
        raise ValueError(f"countdown 'numbers' must be a list of integers, got {numbers!r}")
    return list(numbers), int(truth["target"])


def extract_equation(response: str) -> str | None:
    """The expression in the last ``<answer>`` block, without a trailing ``= value``."""
    blocks = _ANSWER.findall(response)
    if not blocks:
        return None
    return blocks[-1].split("=")[0].strip()


def uses_given_numbers(used: list[int], given: list[int]) -> bool:
    """True when every number in ``used`` is available in ``given`` (each at most once)."""
    return not Counter(used) - Counter(given)


@REWARD_FNS.register("countdown_reward")
def countdown_reward(response: str, truth: Any) -> dict[str, float]:
    """0.1 for a well-formed answer expression, plus 1.0 when it is a correct solution."""
    numbers, target = countdown_truth(truth)
    equation = extract_equation(response)
    if equation is None:
        return {"format": 0.0, "accuracy": 0.0}
    try:
        expr = evaluate(equation)
    except ExpressionError:
        return {"format": 0.0, "accuracy": 0.0}
    correct = uses_given_numbers(expr.numbers, numbers) and expr.value == Fraction(target)
    return {"format": FORMAT_SCORE, "accuracy": float(correct)}
