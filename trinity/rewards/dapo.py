"""``math_dapo_reward``: DAPO's rule-based math reward with its overlong reward shaping
(Yu et al., arXiv:2503.14476, section 3.4, eq. 13).

The outcome reward is +1 for a correct final answer and -1 otherwise. With
``enable_overlong_penalty`` a response of |y| tokens also gets the soft length penalty

    R_length(y) = 0                              |y| <= L_max - L_cache
                = ((L_max - L_cache) - |y|) / L_cache * penalty_factor
                                                 L_max - L_cache < |y| <= L_max
                = -penalty_factor                |y| > L_max

with L_max = ``max_response_length`` and L_cache = ``cache_length`` (the overlong
buffer). Example: L_max 20, L_cache 4, |y| 18: (16 - 18) / 4 = -0.5. The components are
``accuracy`` and ``format_score`` (the penalty), so the reward is their sum and
``algorithm.dynamic_sampling.metric_key: accuracy`` compares the outcome only. The
workflow passes ``response_length`` (tokens) to a reward function that takes it.
"""

from __future__ import annotations

from trinity.rewards.math import DEFAULT_TIMEOUT_S, answers_match
from trinity.rewards.registry import REWARD_FNS


def overlong_penalty(
    response_length: int, max_response_length: int, cache_length: int, penalty_factor: float
) -> float:
    """R_length of the module docstring (0 or negative).

    >>> overlong_penalty(18, max_response_length=20, cache_length=4, penalty_factor=1.0)
    -0.5
    >>> overlong_penalty(16, max_response_length=20, cache_length=4, penalty_factor=1.0)
    0.0
    """
    if not 0 < cache_length < max_response_length:
        raise ValueError(
            f"cache_length must be in (0, max_response_length = {max_response_length}), "
            f"got {cache_length}"
        )
    expected = max_response_length - cache_length
    if response_length <= expected:
        return 0.0
    if response_length > max_response_length:
        return -penalty_factor
    return (expected - response_length) / cache_length * penalty_factor


@REWARD_FNS.register("math_dapo_reward")
def math_dapo_reward(
    response: str,
    truth: object,
    response_length: int | None = None,
    enable_overlong_penalty: bool = False,
    penalty_factor: float = 1.0,
    max_response_length: int | None = None,
    cache_length: int | None = None,
    verify_timeout: float = DEFAULT_TIMEOUT_S,
) -> dict[str, float]:
    """+1 / -1 for the final answer, plus the overlong penalty when enabled."""
    accuracy = 1.0 if answers_match(response, truth, verify_timeout) else -1.0
    penalty = 0.0
    if enable_overlong_penalty:
        if response_length is None or max_response_length is None or cache_length is None:
            raise ValueError(
                "math_dapo_reward: enable_overlong_penalty needs reward_fn_args "
                "max_response_length and cache_length, and the response's length in tokens"
            )
        penalty = overlong_penalty(
            response_length, max_response_length, cache_length, penalty_factor
        )
    return {"accuracy": accuracy, "format_score": penalty}
