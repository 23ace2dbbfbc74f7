"""Rewards for the shape of a response and for the answer it states in ``<answer>`` tags.

``format_reward`` checks ``<think>...</think><answer>...</answer>``; ``accuracy_reward``
compares what is inside ``<answer>`` (or the whole response when there is no such
block) with the reference, as maths when both sides parse as maths, else as text.

    >>> format_reward("<think>2 and 2</think> <answer>4</answer>", "4")
    {'format': 1.0}
    >>> accuracy_reward("<answer> Paris. </answer>", "paris")
    {'accuracy': 1.0}
"""

from __future__ import annotations

from trinity.rewards.math import equivalent, reference_answer
from trinity.rewards.registry import REWARD_FNS
from trinity.rewards.tags import has_think_answer_format, tagged_answer
from trinity.rewards.verifier import DEFAULT_TIMEOUT_S


def normalize_text(text: str) -> str:
    """Lower case, single spaces, no surrounding quotes or final period."""
    text = " ".join(str(text).split()).lower()
    return text.strip("\"'").rstrip(".").strip()


@REWARD_FNS.register("format_reward")
def format_reward(response: str, truth: object) -> dict[str, float]:
    """1.0 when the response is ``<think>...</think><answer>...</answer>``, else 0.0."""
    return {"format": float(has_think_answer_format(response))}


@REWARD_FNS.register("accuracy_reward")
def accuracy_reward(
    response: str, truth: object, verify_timeout: float = DEFAULT_TIMEOUT_S
) -> dict[str, float]:
    """1.0 when the ``<answer>`` (or the whole response) equals the reference.

    Equal means the same normalized text, or the same value by math-verify (at most
    ``verify_timeout`` seconds, see :mod:`trinity.rewards.verifier`).
    """
    answer = tagged_answer(response)
    if answer is None:
        answer = response.strip()
    if normalize_text(answer) == normalize_text(reference_answer(truth)):
        return {"accuracy": 1.0}
    return {"accuracy": float(bool(answer) and equivalent(answer, truth, verify_timeout))}
