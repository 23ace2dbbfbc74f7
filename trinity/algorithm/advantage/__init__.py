"""Advantage functions, one module per family; importing this package registers them."""

from trinity.algorithm.advantage import grpo, opmd, ppo, reinforce_plus_plus, remax, rloo
from trinity.algorithm.advantage.base import (
    AdvantageFn,
    AdvantageInputs,
    MissingInputError,
    discounted_returns,
    group_stats,
)

__all__ = [
    "AdvantageFn",
    "AdvantageInputs",
    "MissingInputError",
    "discounted_returns",
    "group_stats",
    "grpo",
    "opmd",
    "ppo",
    "reinforce_plus_plus",
    "remax",
    "rloo",
]
