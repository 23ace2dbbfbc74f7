"""On-policy distillation: the policy (the student) answers, a teacher scores its tokens.

The student samples ``repeat_times`` replies to the task's prompt. The teacher, the first
of ``explorer.auxiliary_models``, then computes the log-probability of exactly those
tokens given the same prompt (one batched forward pass, nothing sampled) and the values
go to ``Experience.teacher_logprobs``. The trainer's advantage function
(``on_policy_distill``: teacher minus student; ``jsd``) turns them into per-token
advantages, so nothing is learned from the reward. The teacher is never trained and
never receives weights; it must use the student's tokenizer (the same token ids).

- ``on_policy_distill_workflow``: the prompt as ``math_workflow`` builds it. The reward
  is for monitoring only: the taskset's reward function when it names one
  (``default_reward_fn_type``), else 0.
- ``on_policy_distill_math_workflow``: the question plus ``math_boxed_workflow``'s
  instruction, each reply scored by ``math_boxed_reward`` (or the taskset's function).

Each experience records the metric ``teacher_kl``: the mean over its trained tokens of
``logprobs - teacher_logprobs``, the sampled estimate of the per-token reverse KL
KL(student || teacher) (logged as ``rollout/teacher_kl/mean``).

``workflow_args``: ``temperature``, the temperature the teacher scores at (default: the
taskset's rollout temperature, the one the student's log-probs were taken at, else 1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trinity.rewards.registry import task_reward_fn
from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.math_boxed import INSTRUCTION
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import RewardFn, build_messages, rollout_args, score

if TYPE_CHECKING:
    from trinity.rollout.wrapper import ModelWrapper


class TeacherMissingError(ValueError):
    """An on-policy distillation workflow ran without a teacher model."""


def teacher_kl(exp: Experience) -> float:
    """Mean of ``logprobs - teacher_logprobs`` over ``exp``'s trained tokens (0 if none)."""
    mask = exp.action_mask.bool()
    if not bool(mask.any()):
        return 0.0
    return float((exp.logprobs[mask] - exp.teacher_logprobs[mask]).mean())


async def add_teacher_logprobs(
    teacher: ModelWrapper, experiences: list[Experience], temperature: float
) -> None:
    """Set each experience's ``teacher_logprobs`` (R,) and its ``teacher_kl`` metric."""
    scored = await teacher.aresponse_logprobs(experiences, temperature)
    for exp, values in zip(experiences, scored, strict=True):
        if values.numel() != exp.response_length:
            raise ValueError(
                f"the teacher returned {values.numel()} log-probs for {exp.response_length} "
                "response tokens"
            )
        exp.teacher_logprobs = values
        exp.metrics["teacher_kl"] = teacher_kl(exp)


@WORKFLOWS.register("on_policy_distill_workflow")
class OnPolicyDistillWorkflow(Workflow):
    """Student replies, scored token by token by the teacher (``auxiliary_models[0]``)."""

    #: the reward function when the taskset names none; None: reward 0
    default_reward_fn: str | None = None

    def messages(self) -> list[dict[str, Any]]:
        return build_messages(self.task.raw, self.task.format)

    def reward_fn(self) -> RewardFn | None:
        name = self.task.reward_fn or self.default_reward_fn
        return None if name is None else task_reward_fn(self.task, name)

    async def run_async(self) -> list[Experience]:
        if not self.auxiliary_models:
            raise TeacherMissingError(
                f"{type(self).__name__} needs a teacher model: add it to "
                "explorer.auxiliary_models (the first one is the teacher)"
            )
        task = self.task
        args = rollout_args(task)
        temperature = float(task.workflow_args.get("temperature", args.get("temperature") or 1.0))
        experiences = await self.model.achat(self.messages(), n=task.repeat_times, **args)
        await add_teacher_logprobs(self.auxiliary_models[0], experiences, temperature)
        reward_fn = self.reward_fn()
        for run, exp in enumerate(experiences):
            if reward_fn is None:
                exp.reward = 0.0
            else:
                score(exp, reward_fn, exp.response_text or "", task.answer, task, self.logger)
            exp.eid.run = run
        return experiences


@WORKFLOWS.register("on_policy_distill_math_workflow")
class OnPolicyDistillMathWorkflow(OnPolicyDistillWorkflow):
    """Math questions answered in ``\\boxed{}``; the reward (monitoring) is correctness."""

    default_reward_fn = "math_boxed_reward"

    def messages(self) -> list[dict[str, Any]]:
        messages = super().messages()
        instruction = str(self.task.workflow_args.get("instruction", INSTRUCTION))
        messages[-1]["content"] = f"{messages[-1]['content']}\n{instruction}"
        return messages


__all__ = [
    "OnPolicyDistillMathWorkflow",
    "OnPolicyDistillWorkflow",
    "TeacherMissingError",
    "add_teacher_logprobs",
    "teacher_kl",
]
