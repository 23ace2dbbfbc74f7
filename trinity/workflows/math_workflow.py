"""``math_workflow``: ask the question, sample ``repeat_times`` answers, score each.

The prompt is the task's ``prompt_key`` field as a user message, preceded by the
format's ``system_prompt`` (or the row's ``system_prompt_key`` field) when given; with
``prompt_type: messages`` it is the row's message list. The reward function
(``math_reward`` unless the taskset names another) compares each answer with the
task's ``response_key`` field. ``async_math_workflow`` is the same workflow (Trinity-RFT
kept sync and async variants; here every workflow runs as a coroutine).

``simple_workflow`` (also ``async_simple_workflow``) is the same with no default reward
function: the taskset must name one, and it takes no ``workflow_args``.
"""

from __future__ import annotations

from trinity.rewards.registry import task_reward_fn
from trinity.types import Experience
from trinity.workflows.args import NoArgs, read_args
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import build_messages, sample_and_score

__all__ = ["MathWorkflow", "SimpleWorkflow", "build_messages"]


@WORKFLOWS.register("async_math_workflow")  # Trinity-RFT's name; every workflow is async here
@WORKFLOWS.register("math_workflow")
class MathWorkflow(Workflow):
    """Single-turn question answering scored by a reward function."""

    one_experience_per_rollout = True  # sample_and_score: one reply per rollout

    async def run_async(self) -> list[Experience]:
        task = self.task
        reward_fn = task_reward_fn(task, "math_reward")
        messages = build_messages(task.raw, task.format)
        return await sample_and_score(
            self.model, task, messages, reward_fn, task.answer, self.logger
        )


@WORKFLOWS.register("async_simple_workflow")  # Trinity-RFT's name; every workflow is async here
@WORKFLOWS.register("simple_workflow")
class SimpleWorkflow(MathWorkflow):
    """``math_workflow`` scored by the reward function the taskset names."""

    async def run_async(self) -> list[Experience]:
        read_args(self.task, NoArgs, self.task.workflow)
        if not self.task.reward_fn:
            raise ValueError(
                f"{self.task.workflow} needs a reward function: set default_reward_fn_type "
                f"of taskset '{self.task.taskset}' (e.g. math_reward)"
            )
        return await super().run_async()
