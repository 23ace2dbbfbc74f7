"""Reward functions for tasks with a mathematical answer.

``math_reward`` checks the response's final answer against the task's reference answer
with math-verify, which understands numbers, fractions, LaTeX and ``\\boxed{}``. A
GSM8K-style reference ("...reasoning... #### 72") is reduced to what follows ``####``.
math-verify runs in worker processes (:mod:`trinity.rewards.verifier`), so one answer
takes at most ``verify_timeout`` seconds (a ``reward_fn_args`` key); past it, or when
math-verify raises, the reward function raises and the workflow counts and logs it.

    >>> math_reward("13 + 14 = 27.", "27")
    {'accuracy': 1.0}
"""

from __future__ import annotations

import re

from trinity.rewards.registry import REWARD_FNS
from trinity.rewards.tags import has_think_answer_format
from trinity.rewards.verifier import DEFAULT_TIMEOUT_S, default_verifier

_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def reference_answer(truth: object) -> str:
    """The final answer inside a reference solution (GSM8K's ``#### x`` or the whole text)."""
    text = str(truth)
    match = _GSM8K_ANSWER.search(text)
    return (match.group(1) if match else text).replace(",", "").strip()


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")
_INTEGER = re.compile(r"[+-]?\d{1,100}")


def final_answer(response: str) -> str | None:
    """The answer a response commits to: its last ``\\boxed{}``, else its last number.

    Only a stated value counts: an expression such as "9 + 7" restating the question is
    not an answer, so a policy cannot earn reward by echoing the task.
    """
    boxed = boxed_answer(response)
    if boxed is not None:
        return boxed
    numbers = _NUMBER.findall(response.replace(",", ""))
    return numbers[-1] if numbers else None


def boxed_answer(response: str) -> str | None:
    """The content of the response's last complete ``\\boxed{}`` (braces may nest)."""
    start = response.rfind("\\boxed{")
    while start != -1:
        depth, begin = 0, start + len("\\boxed{")
        for i in range(begin, len(response)):
            depth += {"{": 1, "}": -1}.get(response[i], 0)
            if depth < 0:
                return response[begin:i].strip()
        start = response.rfind("\\boxed{", 0, start)  # unclosed: try an earlier one
    return None


def answers_match(response: str, truth: object, verify_timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when the final answer stated in ``response`` equals the reference answer."""
    return equivalent(final_answer(response), truth, verify_timeout)


def equivalent(
    answer: str | None, truth: object, verify_timeout: float = DEFAULT_TIMEOUT_S
) -> bool:
    """True when ``answer`` is mathematically equal to the reference (math-verify).

    Raises :class:`~trinity.rewards.verifier.VerifyTimeout` past ``verify_timeout``
    seconds and :class:`~trinity.rewards.verifier.MathVerifyError` when math-verify raises.
    """
    if answer is None:
        return False
    reference = reference_answer(truth)
    if _INTEGER.fullmatch(answer.strip()) and _INTEGER.fullmatch(reference):
        # two integers: equal as numbers, which is math-verify's verdict too, without a
        # round trip to its worker (or starting one: the arithmetic demo never needs it)
        return int(answer) == int(reference)
    return default_verifier().equivalent(answer, reference, verify_timeout)


@REWARD_FNS.register("math_reward")
def math_reward(
    response: str, truth: object, verify_timeout: float = DEFAULT_TIMEOUT_S
) -> dict[str, float]:
    """1.0 when the response's final answer equals the reference, else 0.0."""
    return {"accuracy": float(answers_match(response, truth, verify_timeout))}


@REWARD_FNS.register("math_format_reward")
def math_format_reward(
    response: str, truth: object, verify_timeout: float = DEFAULT_TIMEOUT_S
) -> dict[str, float]:
    """Accuracy plus a format bonus for ``<think>...</think><answer>...</answer>``."""
    fmt = 0.1 if has_think_answer_format(response) else -0.1
    return {"accuracy": float(answers_match(response, truth, verify_timeout)), "format": fmt}


def reasons_once(response: str) -> bool:
    """True when the response holds exactly one ``<think>`` followed by one ``</think>``."""
    start, end = response.find("<think>"), response.find("</think>")
    once = response.count("<think>") == 1 and response.count("</think>") == 1
    return once and start < end


@REWARD_FNS.register("math_boxed_reward")
def math_boxed_reward(
    response: str,
    truth: object,
    verify_timeout: float = DEFAULT_TIMEOUT_S,
    with_think: bool = False,
    format_score_coef: float = 0.1,
) -> dict[str, float]:
    """1.0 when the response's last ``\\boxed{}`` equals the reference, else 0.0.

    Unlike ``math_reward`` a bare number does not count: the answer must be boxed. With
    ``with_think`` a ``format_score`` component of ``-format_score_coef`` penalises a
    response that does not reason inside exactly one ``<think>...</think>`` (0 otherwise).

        >>> math_boxed_reward("<think>2+2</think> \\boxed{4}", "4", with_think=True)
        {'accuracy': 1.0, 'format_score': 0.0}
    """
    components = {"accuracy": float(equivalent(boxed_answer(response), truth, verify_timeout))}
    if with_think:
        components["format_score"] = 0.0 if reasons_once(response) else -format_score_coef
    return components
