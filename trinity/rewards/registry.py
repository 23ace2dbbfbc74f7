"""Registry of reward functions, selected by ``default_reward_fn_type``.

A reward function is called as ``fn(response, truth, **reward_fn_args)`` and returns
``{component: value}``; the taskset's ``reward_fn_args`` are bound once per task.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from trinity.types import Task
from trinity.utils.registry import Registry

REWARD_FNS: Registry = Registry("reward function")

RewardFn = Callable[[str, Any], dict[str, float]]


class RewardArgsError(TypeError):
    """``reward_fn_args`` names arguments the reward function does not take."""


def task_reward_fn(task: Task, default: str) -> RewardFn:
    """The task's reward function (``default`` when it names none) with its
    ``reward_fn_args`` bound, checked against the function's signature."""
    name = task.reward_fn or default
    fn = REWARD_FNS.get(name)
    if not task.reward_fn_args:
        return fn
    try:
        inspect.signature(fn).bind_partial("response", "truth", **task.reward_fn_args)
    except TypeError as exc:
        params = [p for p in inspect.signature(fn).parameters][2:]
        raise RewardArgsError(
            f"reward_fn_args {sorted(task.reward_fn_args)} of taskset '{task.taskset}' do not fit "
            f"reward function '{name}' ({exc}); it takes {params or 'no extra arguments'}"
        ) from None
    return functools.partial(fn, **task.reward_fn_args)
