"""``math_eval_workflow`` (also ``async_math_eval_workflow``): Qwen2.5-Math's evaluation.

The prompt is Qwen2.5-Math's chain-of-thought one: the system prompt
:data:`EVAL_SYSTEM_PROMPT`, then the row's ``question`` column followed by
:data:`EVAL_INSTRUCTION`. ``repeat_times`` answers are sampled at temperature 0.6 and
top-p 0.8 whatever the taskset's ``rollout_args`` say (its ``max_tokens`` still bounds
them), and each is scored by ``math_boxed_reward`` (unless the taskset names another):
the last ``\\boxed{}`` against the row's ``response_key`` column, as component
``accuracy``. It takes no ``workflow_args``.
"""

from __future__ import annotations

import dataclasses

from trinity.rewards.registry import task_reward_fn
from trinity.types import Experience
from trinity.workflows.args import NoArgs, read_args
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import sample_and_score

EVAL_SYSTEM_PROMPT = "You are a helpful assistant."
EVAL_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
EVAL_SAMPLING = {"temperature": 0.6, "top_p": 0.8}


@WORKFLOWS.register("async_math_eval_workflow")  # Trinity-RFT's name; every workflow is async
@WORKFLOWS.register("math_eval_workflow")
class MathEvalWorkflow(Workflow):
    """Math questions answered in ``\\boxed{}``, sampled as Qwen2.5-Math evaluates."""

    one_experience_per_rollout = True  # sample_and_score: one reply per rollout
    reads_prompt = False  # the row's ``question`` column, whatever the format says

    async def run_async(self) -> list[Experience]:
        task = self.task
        read_args(task, NoArgs, task.workflow)
        if "question" not in task.raw:
            raise ValueError(
                f"{task.workflow} reads the row's 'question' column; its columns are "
                f"{sorted(task.raw)}"
            )
        messages = [
            {"role": "system", "content": EVAL_SYSTEM_PROMPT},
            {"role": "user", "content": f"{task.raw['question']}\n{EVAL_INSTRUCTION}"},
        ]
        sampling = dict(EVAL_SAMPLING)
        if task.rollout_args.get("max_tokens") is not None:
            sampling["max_tokens"] = task.rollout_args["max_tokens"]
        reward_fn = task_reward_fn(task, "math_boxed_reward")
        return await sample_and_score(
            self.model,
            dataclasses.replace(task, rollout_args=sampling),
            messages,
            reward_fn,
            task.answer,
            self.logger,
        )
