"""Registry of reward functions, selected by ``default_reward_fn_type``."""

from trinity.utils.registry import Registry

REWARD_FNS: Registry = Registry("reward function")
