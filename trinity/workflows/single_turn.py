"""Pieces shared by the workflows that sample one reply per rollout and score it.

``build_messages`` turns a task row into chat messages, ``sample_and_score`` samples
``repeat_times`` replies and scores each with a reward function, and ``set_reward``
stores a reward function's components on an experience: the reward is their sum, and
each component is kept as the metric ``reward/<name>`` (logged as
``rollout/reward/<name>/mean``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trinity.types import Experience, Task

if TYPE_CHECKING:
    from trinity.models.wrapper import ModelWrapper

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


async def sample_and_score(
    model: ModelWrapper,
    task: Task,
    messages: list[dict[str, Any]],
    reward_fn: RewardFn,
    truth: Any,
) -> list[Experience]:
    """Sample ``task.repeat_times`` replies to ``messages``; score each with ``reward_fn``."""
    experiences = await model.achat(messages, n=task.repeat_times, **rollout_args(task))
    for run, exp in enumerate(experiences):
        set_reward(
            exp, reward_fn(exp.response_text or "", truth), f"reward function of task {task.index}"
        )
        exp.eid.run = run
    return experiences
