"""A test workflow whose behaviour each task row picks, and configs built on the demo.

Task rows carry ``behaviour``: ``ok`` samples a short answer from the tiny model,
``raise`` raises, ``hang`` blocks until the test releases ``RELEASE`` (or 120 s).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from trinity.types import Experience, Task
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "examples" / "arithmetic" / "grpo.yaml"
RELEASE = threading.Event()  # set at teardown, so no hung thread outlives its test


class DeliberateFailure(RuntimeError):
    """Raised by tasks whose behaviour is ``raise``."""


@WORKFLOWS.register("behaviour_test_workflow")
class BehaviourWorkflow(Workflow):
    async def run_async(self) -> list[Experience]:
        behaviour = self.task.raw["behaviour"]
        if behaviour == "raise":
            raise DeliberateFailure(f"task {self.task.index} fails on purpose")
        if behaviour == "hang":
            RELEASE.wait(120)
            return []
        args = {k: v for k, v in self.task.rollout_args.items() if v is not None}
        experiences = await self.model.achat(
            [{"role": "user", "content": self.task.prompt}], n=self.task.repeat_times, **args
        )
        for run, exp in enumerate(experiences):
            exp.reward = float(run)  # run r scores r: best@k = k - 1, worst@k = 0
            exp.eid.run = run
            exp.info["env"] = os.environ.get("TRINITY_TEST_ENV")
        return experiences


def behaviour_task(
    index: int, behaviour: str, workflow: str = "behaviour_test_workflow", **rollout_args
) -> Task:
    """One task of ``workflow`` with the given ``behaviour``, outside any taskset."""
    return Task(
        raw={"question": "1 + 1 = ?", "behaviour": behaviour},
        workflow=workflow,
        reward_fn=None,
        repeat_times=1,
        taskset="t",
        index=index,
        rollout_args=rollout_args,
        format={"prompt_key": "question"},
    )


def write_tasks(directory: Path, split: str, behaviours: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rows = [
        {"question": f"{i} + 1 = ?", "answer": str(i + 1), "behaviour": b}
        for i, b in enumerate(behaviours)
    ]
    (directory / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def behaviour_config(model_dir: Path, root: Path, data: Path, *overrides: str):
    """The demo config on the tiny model, running ``behaviour_test_workflow``."""
    from trinity.config import load_config

    return load_config(
        DEMO,
        [
            f"model.model_path={model_dir}",
            f"checkpoint_root_dir={root}",
            "continue_from_checkpoint=true",
            "algorithm.repeat_times=2",
            "model.max_response_tokens=4",
            f"buffer.explorer_input.taskset.path={data}",
            f"buffer.explorer_input.eval_tasksets[0].path={data}",
            "buffer.explorer_input.default_workflow_type=behaviour_test_workflow",
            "buffer.default_workflow_type=behaviour_test_workflow",
            *overrides,
        ],
    )
