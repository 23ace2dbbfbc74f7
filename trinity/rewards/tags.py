"""The ``<think>...</think><answer>...</answer>`` shape of a response, and its answer block."""

from __future__ import annotations

import re

_THINK_ANSWER = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def has_think_answer_format(response: str) -> bool:
    """True for exactly ``<think>...</think>`` then ``<answer>...</answer>`` and nothing else."""
    return bool(_THINK_ANSWER.match(response))


def tagged_answer(response: str) -> str | None:
    """The content of the last ``<answer>...</answer>`` block, or None."""
    blocks = _ANSWER.findall(response)
    return blocks[-1].strip() if blocks else None
