"""Pieces shared by the workflows that sample one reply per rollout and score it.

``build_messages`` turns a task row into chat messages, ``sample_and_score`` samples
``repeat_times`` replies and scores each with a reward function, and ``set_reward``
stores a reward function's components on an experience: the reward is their sum, and
each component is kept as the metric ``reward/<name>`` (logged as
``rollout/reward/<name>/mean``). ``score`` calls a reward function for one experience:
when it raises (or returns something ``set_reward`` rejects), the experience gets reward
0 and ``info["reward_error"]`` (counted as ``rollout/reward_errors``), and the traceback
goes to the workflow's log; the other rollouts are scored as usual.
"""

from __future__ import annotations

import inspect
import logging
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trinity.types import Experience, Task

if TYPE_CHECKING:
    from trinity.rollout.wrapper import ModelWrapper

RewardFn = Callable[[str, Any], dict[str, float]]


def build_messages(task_raw: dict, fmt: dict) -> list[dict[str, Any]]:
    """Chat messages of a task row.

    ``prompt_type: messages`` takes the row's ``messages_key`` list as it is; plaintext
    builds an optional system prompt (``system_prompt_key`` column, else
    ``system_prompt``) followed by the ``prompt_key`` column as the user message.
    """
    if fmt.get("prompt_type") == "messages":
        key = fmt.get("messages_key") or "messages"
        messages = task_raw.get(key)
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError(
                f"task column '{key}' (format.messages_key) must be a list of chat messages, "
                f"got {type(messages).__name__}"
            )
        return [dict(m) for m in messages]
    key = fmt.get("prompt_key") or "prompt"
    if key not in task_raw:
        raise KeyError(
            f"task has no column '{key}' (format.prompt_key); its columns are {sorted(task_raw)}"
        )
    messages = []
    system = task_raw.get(fmt["system_prompt_key"]) if fmt.get("system_prompt_key") else None
    system = system or fmt.get("system_prompt")
    if system:
        messages.append({"role": "system", "content": str(system)})
    messages.append({"role": "user", "content": str(task_raw[key])})
    return messages


def rollout_args(task: Task) -> dict[str, Any]:
    """The taskset's sampling arguments that are set (unset ones keep the model's defaults)."""
    return {k: v for k, v in task.rollout_args.items() if v is not None}


def set_reward(
    exp: Experience, components: dict[str, float], source: str = "reward function"
) -> None:
    """Store ``components`` on ``exp``: reward = their sum, each one as ``reward/<name>``."""
    if not isinstance(components, dict) or not components:
        raise TypeError(f"{source} must return a non-empty dict name -> float, got {components!r}")
    values = {}
    for name, value in components.items():
        try:
            values[str(name)] = float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"{source} returned a non-numeric value for '{name}': {value!r}"
            ) from None
    exp.reward = sum(values.values())
    exp.metrics.update({f"reward/{name}": value for name, value in values.items()})


def score(
    exp: Experience,
    reward_fn: RewardFn,
    response: str,
    truth: Any,
    task: Task,
    logger: logging.Logger,
) -> None:
    """Set ``exp``'s reward to ``reward_fn(response, truth)``; on an error, reward 0,
    ``exp.info["reward_error"]`` and the traceback in ``logger``'s log."""
    try:
        # a length-shaped reward (math_dapo_reward) reads the response's length in tokens
        extra = {}
        if "response_length" in inspect.signature(reward_fn).parameters:
            extra["response_length"] = exp.response_length
        components = reward_fn(response, truth, **extra)
        set_reward(exp, components, f"reward function of task {task.index}")
    except Exception as exc:
        logger.error(
            "reward function of task %s of taskset '%s' raised; the rollout gets reward 0:\n%s",
            task.index,
            task.taskset,
            traceback.format_exc(),
        )
        exp.reward = 0.0
        exp.info["reward_error"] = f"{type(exc).__name__}: {exc}"


async def sample_and_score(
    model: ModelWrapper,
    task: Task,
    messages: list[dict[str, Any]],
    reward_fn: RewardFn,
    truth: Any,
    logger: logging.Logger | None = None,
) -> list[Experience]:
    """Sample ``task.repeat_times`` replies to ``messages``; score each with ``reward_fn``
    (errors go to ``logger``: pass the workflow's, which writes the runner's log)."""
    logger = logger or logging.getLogger("trinity.workflows")
    experiences = await model.achat(messages, n=task.repeat_times, **rollout_args(task))
    for run, exp in enumerate(experiences):
        score(exp, reward_fn, exp.response_text or "", truth, task, logger)
        exp.eid.run = run
    return experiences
