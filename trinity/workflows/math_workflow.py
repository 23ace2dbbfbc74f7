"""``math_workflow``: ask the question, sample ``repeat_times`` answers, score each.

The prompt is the task's ``prompt_key`` field as a user message, preceded by the
format's ``system_prompt`` (or the row's ``system_prompt_key`` field) when given. The
reward function (``math_reward`` unless the taskset names another) compares each
answer with the task's ``response_key`` field.
"""

from __future__ import annotations

from trinity.rewards.registry import REWARD_FNS
from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS


def build_messages(task_raw: dict, fmt: dict) -> list[dict[str, str]]:
    """Chat messages for a plaintext task: optional system prompt, then the question."""
    messages = []
    system = None
    if fmt.get("system_prompt_key"):
        system = task_raw.get(fmt["system_prompt_key"])
    system = system or fmt.get("system_prompt")
    if system:
        messages.append({"role": "system", "content": str(system)})
    messages.append({"role": "user", "content": str(task_raw[fmt.get("prompt_key") or "prompt"])})
    return messages


@WORKFLOWS.register("math_workflow")
class MathWorkflow(Workflow):
    """Single-turn question answering scored by a reward function."""

    async def run_async(self) -> list[Experience]:
        task = self.task
        messages = build_messages(task.raw, task.format)
        reward_fn = REWARD_FNS.get(task.reward_fn or "math_reward")
        truth = task.answer
        rollout_args = {k: v for k, v in task.rollout_args.items() if v is not None}
        experiences = await self.model.achat(messages, n=task.repeat_times, **rollout_args)
        for run, exp in enumerate(experiences):
            components = reward_fn(exp.response_text or "", truth)
            exp.reward = float(sum(components.values()))
            exp.metrics.update({f"reward/{k}": float(v) for k, v in components.items()})
            exp.eid.run = run
        return experiences
