"""Reward functions: ``fn(response, truth) -> {component: value}``; the reward is the sum."""

from trinity.rewards import math as _math  # noqa: F401  (registers the built-in rewards)
from trinity.rewards.registry import REWARD_FNS

__all__ = ["REWARD_FNS"]
