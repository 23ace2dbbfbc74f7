"""``rlcr_reward``: RLCR, reinforcement learning with calibration rewards (Damani et al.,
"Beyond Binary Rewards: Training LMs to Reason About Their Uncertainty",
arXiv:2507.16806), as Trinity-RFT's five weighted components for math answers.

The response must end with four tagged blocks, nothing but whitespace between them and
after the last:

    <think>...</think><answer>...</answer><analysis>...</analysis><confidence>q</confidence>

where q is a number in [0, 1], the model's probability that its answer is right. Tags
earlier in the response must open and close in pairs, one block at a time. With
c = 1 when the ``<answer>`` equals the reference (math-verify, as ``math_reward``),
else 0, the components are, each times its weight (Trinity-RFT's defaults)::

    format                  0.5    1 when the response ends as above, else 0
    accuracy                0.5    c (0 without the format)
    brier                   0.5    1 - (c - q)^2 (0 without the format)
    mean_confidence         1e-5   q of the last <confidence> block, 0 if none is a number in [0, 1]
    confidence_one_or_zero  1e-5   1 when that q is below 0.01 or above 0.99, else 0

The reward is their sum. With the format met and weights 1 on accuracy and brier, they
add up to the paper's RLCR reward c - (q - c)^2 plus 1; the last two components, with
their tiny weights, only log how confident and how extreme the stated confidences are.
Example, a right answer stated with q = 0.8: format 0.5, accuracy 0.5, brier
0.5 * (1 - 0.2^2) = 0.48, mean_confidence 8e-6, confidence_one_or_zero 0.

``reward_fn_args`` (Trinity-RFT's names): ``weights``, a mapping of exactly the five
components to finite numbers; ``answer_parser`` and ``verifier``, Python callables
(for plugins; none can be written in YAML): ``verifier(answer_parser(answer),
answer_parser(reference))`` decides c. The default parser strips the text and the
default verifier is math-verify, bounded by ``verify_timeout`` seconds. Past it, or
when math-verify raises, the reward function raises as the other math rewards do, so
the rollout is counted in ``rollout/reward_errors`` and rewarded 0 (Trinity-RFT scores
accuracy and brier 0 then and keeps the other components).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from numbers import Real
from typing import Any

from trinity.rewards.math import equivalent
from trinity.rewards.registry import REWARD_FNS
from trinity.rewards.verifier import DEFAULT_TIMEOUT_S

BLOCKS = ("think", "answer", "analysis", "confidence")  # the closing chain, in order
DEFAULT_WEIGHTS = {
    "format": 0.5,
    "accuracy": 0.5,
    "brier": 0.5,
    "mean_confidence": 1e-5,
    "confidence_one_or_zero": 1e-5,
}
_TAG = re.compile(r"<(/?)(think|answer|analysis|confidence)>")


def confidence_value(text: str) -> float | None:
    """The number ``text`` holds when it is finite and in [0, 1], else None."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def closing_blocks(response: str) -> dict[str, str] | None:
    """The contents of the four closing blocks when the response ends with them (module
    docstring) and every earlier tag pairs up, else None."""
    tags = list(_TAG.finditer(response))
    open_name = None
    for tag in tags:
        closing, name = tag.group(1) == "/", tag.group(2)
        if closing != (open_name is not None) or (closing and name != open_name):
            return None  # a block opened inside another, or a close without its open
        open_name = None if closing else name
    if open_name is not None or len(tags) < 2 * len(BLOCKS):
        return None
    chain = tags[-2 * len(BLOCKS) :]  # four open / close pairs, as every tag pairs up
    if tuple(t.group(2) for t in chain[::2]) != BLOCKS:
        return None
    gaps = [response[a.end() : b.start()] for a, b in zip(chain[1:-1:2], chain[2::2], strict=True)]
    if any(gap.strip() for gap in [*gaps, response[chain[-1].end() :]]):
        return None
    return {
        name: response[chain[2 * i].end() : chain[2 * i + 1].start()]
        for i, name in enumerate(BLOCKS)
    }


def stated_confidence(response: str) -> float | None:
    """q of the last ``<confidence>...</confidence>`` block, whatever the rest of the
    response looks like; None when there is none or it holds no number in [0, 1]."""
    start, end = response.rfind("<confidence>"), response.rfind("</confidence>")
    if start < 0 or end < start:
        return None
    payload = response[start + len("<confidence>") : end]
    return None if _TAG.search(payload) else confidence_value(payload)


def checked_weights(weights: Any) -> dict[str, float]:
    """``weights`` as floats, or the defaults for None; errors name the key."""
    if weights is None:
        return dict(DEFAULT_WEIGHTS)
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"rlcr_reward: weights must map {', '.join(DEFAULT_WEIGHTS)} to numbers, "
            f"got {weights!r}"
        )
    missing = sorted(set(DEFAULT_WEIGHTS) - set(weights))
    unknown = sorted(set(weights) - set(DEFAULT_WEIGHTS), key=str)
    if missing or unknown:
        raise ValueError(
            f"rlcr_reward: weights needs exactly {', '.join(DEFAULT_WEIGHTS)}; "
            f"missing {missing}, unknown {unknown}"
        )
    checked = {}
    for name in DEFAULT_WEIGHTS:
        value = weights[name]
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
            raise ValueError(f"rlcr_reward: weights.{name} must be a finite number, got {value!r}")
        checked[name] = float(value)
    return checked


def _strip(text: str) -> str:
    return text.strip()


@REWARD_FNS.register("rlcr_reward")
def rlcr_reward(
    response: str,
    truth: object,
    weights: Mapping[str, float] | None = None,
    answer_parser: Callable[[str], Any] | None = None,
    verifier: Callable[[Any, Any], bool] | None = None,
    verify_timeout: float = DEFAULT_TIMEOUT_S,
) -> dict[str, float]:
    """Format, accuracy, Brier calibration and confidence statistics, weighted."""
    w = checked_weights(weights)
    for key, fn in (("answer_parser", answer_parser), ("verifier", verifier)):
        if fn is not None and not callable(fn):
            raise TypeError(f"rlcr_reward: {key} must be a Python callable, got {fn!r}")
    parse = answer_parser or _strip
    blocks = closing_blocks(response)
    q = None if blocks is None else confidence_value(blocks["confidence"])
    fmt = accuracy = brier = 0.0
    if blocks is not None and q is not None:
        fmt = 1.0
        answer, reference = parse(blocks["answer"]), parse(str(truth))
        if verifier is None:
            accuracy = float(equivalent(str(answer), reference, verify_timeout))
        else:
            accuracy = float(bool(verifier(answer, reference)))
        brier = 1.0 - (accuracy - q) ** 2
    stated = stated_confidence(response)
    extreme = stated is not None and (stated < 0.01 or stated > 0.99)
    return {
        "format": w["format"] * fmt,
        "accuracy": w["accuracy"] * accuracy,
        "brier": w["brier"] * brier,
        "mean_confidence": w["mean_confidence"] * (stated or 0.0),
        "confidence_one_or_zero": w["confidence_one_or_zero"] * float(extreme),
    }
