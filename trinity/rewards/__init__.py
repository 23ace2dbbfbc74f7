"""Reward functions: ``fn(response, truth) -> {component: value}``; the reward is the sum.

Importing this package registers the built-ins: ``math_reward``, ``math_format_reward``,
``math_boxed_reward``, ``format_reward``, ``accuracy_reward``, ``countdown_reward``,
``math_dapo_reward``, ``rlcr_reward``.
"""

from trinity.rewards import countdown as _countdown  # noqa: F401  (registers the built-ins)
from trinity.rewards import dapo as _dapo  # noqa: F401
from trinity.rewards import format as _format  # noqa: F401
from trinity.rewards import math as _math  # noqa: F401
from trinity.rewards import rlcr as _rlcr  # noqa: F401
from trinity.rewards.registry import REWARD_FNS

__all__ = ["REWARD_FNS"]
