"""``countdown_workflow``: reach a target number from a few given numbers.

The task row holds the numbers (column ``nums``) and the target (column ``target``);
``workflow_args.numbers_key`` / ``target_key`` name other columns. The prompt asks for
an expression inside ``<answer>`` tags that uses each number at most once; replies are
scored by ``countdown_reward`` (unless the taskset names another). Tasks come from
``examples/countdown/make_data.py``.
"""

from __future__ import annotations

from trinity.rewards.registry import task_reward_fn
from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import sample_and_score

PROMPT = (
    "Numbers: {numbers}. Target: {target}.\n"
    "Write an arithmetic expression that equals the target, using + - * / and "
    "parentheses, each number at most once. Think inside <think> </think>, then give "
    "only the expression inside <answer> </answer>, for example <answer>(3 + 5) * 2</answer>."
)


def countdown_task(raw: dict, numbers_key: str = "nums", target_key: str = "target") -> dict:
    """``{"numbers": [...], "target": n}`` from a task row; a clear error when columns lack."""
    missing = [k for k in (numbers_key, target_key) if k not in raw]
    if missing:
        raise KeyError(
            f"countdown task lacks column(s) {missing} (workflow_args numbers_key / target_key); "
            f"its columns are {sorted(raw)}"
        )
    return {"numbers": [int(n) for n in raw[numbers_key]], "target": int(raw[target_key])}


@WORKFLOWS.register("countdown_workflow")
class CountdownWorkflow(Workflow):
    """Countdown number puzzles, scored by an exact ``ast`` evaluation of the answer."""

    one_experience_per_rollout = True  # sample_and_score: one reply per rollout
    reads_prompt = False  # the prompt is built from the numbers and the target

    async def run_async(self) -> list[Experience]:
        task = self.task
        args = task.workflow_args
        truth = countdown_task(
            task.raw, args.get("numbers_key", "nums"), args.get("target_key", "target")
        )
        reward_fn = task_reward_fn(task, "countdown_reward")
        content = PROMPT.format(
            numbers=", ".join(map(str, truth["numbers"])), target=truth["target"]
        )
        messages = [{"role": "user", "content": content}]
        system = task.format.get("system_prompt")
        if system:
            messages.insert(0, {"role": "system", "content": str(system)})
        return await sample_and_score(self.model, task, messages, reward_fn, truth, self.logger)
