"""Advantage functions, one module per family; importing this package registers them."""

from trinity.algorithm.advantage import (
    asymre,
    distill,
    entropy_clip,
    gigpo,
    grpo,
    multi_step,
    opmd,
    ppo,
    rec,
    reinforce,
    reinforce_plus_plus,
    remax,
    rloo,
)
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
    "asymre",
    "discounted_returns",
    "distill",
    "entropy_clip",
    "gigpo",
    "group_stats",
    "grpo",
    "multi_step",
    "opmd",
    "ppo",
    "rec",
    "reinforce",
    "reinforce_plus_plus",
    "remax",
    "rloo",
]
