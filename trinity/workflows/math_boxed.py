"""``math_boxed_workflow``: the prompt asks for the final answer in ``\\boxed{}``.

Each reply is scored by ``math_boxed_reward`` (unless the taskset names another): only
the last ``\\boxed{}`` counts, compared with the task's ``response_key`` field by
math-verify. ``workflow_args``:

- ``format_score`` (default 0): when above 0, a ``format`` component adds this much to
  every reply that states a boxed answer, right or wrong;
- ``instruction``: the sentence appended to the question (default below).
"""

from __future__ import annotations

from trinity.rewards.math import boxed_answer
from trinity.rewards.registry import task_reward_fn
from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import build_messages, sample_and_score

INSTRUCTION = "Reason step by step, then write the final answer as \\boxed{answer}."


@WORKFLOWS.register("math_boxed_workflow")
@WORKFLOWS.register("async_math_boxed_workflow")  # Trinity-RFT's name; every workflow is async here
class MathBoxedWorkflow(Workflow):
    """Math questions answered in ``\\boxed{}``, scored by equivalence (+ optional format)."""

    one_experience_per_rollout = True  # sample_and_score: one reply per rollout

    async def run_async(self) -> list[Experience]:
        task = self.task
        args = task.workflow_args
        format_score = float(args.get("format_score", 0.0))
        accuracy_fn = task_reward_fn(task, "math_boxed_reward")

        def reward_fn(response: str, truth: object) -> dict[str, float]:
            components = dict(accuracy_fn(response, truth))
            if format_score > 0:
                components["format"] = format_score if boxed_answer(response) is not None else 0.0
            return components

        messages = build_messages(task.raw, task.format)
        instruction = str(args.get("instruction", INSTRUCTION))
        messages[-1]["content"] = f"{messages[-1]['content']}\n{instruction}"
        return await sample_and_score(
            self.model, task, messages, reward_fn, task.answer, self.logger
        )
