"""``simple_mm_workflow`` (also ``async_simple_mm_workflow``): a question about the
task's images (and videos), ``repeat_times`` answers from a vision-language model, each
scored by the taskset's reward function.

The user message holds the row's images (``format.image_key``: paths, ``file://`` or
``data:`` URLs, bytes or ``datasets`` Image values, one or a list) and videos
(``format.video_key``: lists of frames) before the ``prompt_key`` text; the system
prompt is the format's (``system_prompt_key`` / ``system_prompt``), else, with
``workflow_args.with_think: true``, one asking for the reasoning in ``<think>`` tags and
the final answer in ``\\boxed{}``. A row whose image cannot be read fails the task in one
line naming the taskset, row and key (the runner counts it and goes on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trinity.rewards.registry import task_reward_fn
from trinity.rollout.media import media_parts, row_media
from trinity.types import Experience, Task
from trinity.workflows.args import read_args
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import build_messages, sample_and_score

THINK_SYSTEM_PROMPT = (
    "You are a helpful assistant. First think about the question step by step and write "
    "your reasoning as <think>\n...your reasoning...\n</think>, then give the final answer "
    "in \\boxed{}."
)


@dataclass
class SimpleMMArgs:
    """``workflow_args`` of ``simple_mm_workflow``."""

    # ask for <think> reasoning and a \boxed{} answer when the format sets no system prompt
    with_think: bool = False


def mm_messages(task: Task, with_think: bool = False) -> list[dict[str, Any]]:
    """Chat messages of a task row: its images and videos, then its prompt text."""
    fmt = dict(task.format)
    if with_think and not (fmt.get("system_prompt") or fmt.get("system_prompt_key")):
        fmt["system_prompt"] = THINK_SYSTEM_PROMPT
    messages = build_messages(task.raw, fmt)
    where = f"taskset '{task.taskset}', row {task.index}"
    images, videos = row_media(task.raw, fmt, where)
    if not images and not videos:
        return messages
    user = messages[-1]
    text = user["content"]
    parts = media_parts(images, videos)
    if isinstance(text, list):
        parts += text
    elif text:
        parts.append({"type": "text", "text": str(text)})
    messages[-1] = {**user, "content": parts}
    return messages


@WORKFLOWS.register("async_simple_mm_workflow")  # Trinity-RFT's name; every workflow is async here
@WORKFLOWS.register("simple_mm_workflow")
class SimpleMMWorkflow(Workflow):
    """Single-turn question answering about images, scored by a reward function."""

    one_experience_per_rollout = True  # sample_and_score: one reply per rollout

    async def run_async(self) -> list[Experience]:
        task = self.task
        args = read_args(task, SimpleMMArgs, task.workflow)
        reward_fn = task_reward_fn(task, "math_reward")
        messages = mm_messages(task, args.with_think)
        return await sample_and_score(
            self.model, task, messages, reward_fn, task.answer, self.logger
        )
