"""``sciworld_workflow``: the policy runs a ScienceWorld experiment by text commands.

ScienceWorld (``pip install 'trinity-rft[envs]'``; its simulator is a Java program, so a
Java runtime must be on ``PATH``: ``apt-get install default-jre-headless``) is a text
world of rooms, substances and devices with 30 task types, each in many variations.
A task row names one: the ``prompt_key`` column (Trinity-RFT's data script writes it)
holds a JSON object, or the row itself has the keys, ``task_name`` (e.g. ``boil``),
``var_num`` (the variation, default 0) and optionally ``jar_path`` (a simulator jar other
than the one the wheel bundles).

Every turn the policy sees the observation (the first one opens with the task's
description) and answers with its reasoning in ``<think>`` and one command in
``<action>``, e.g. ``<action>teleport to kitchen</action>``. A reply without an action
tag moves nothing and the next observation says so. The episode ends when the
simulator says it is over (task done or failed) or after ``max_env_steps`` replies; the
whole conversation is one experience (see :mod:`trinity.workflows.conversation`)
whose reward is the best score the simulator gave during the episode, divided by 100
(component ``score``, in [0, 1]; a failed task's score of -100 counts as 0). ``info``:
``env_steps``, ``env_done``, ``env_score`` (the simulator's last score, -100..100).

``workflow_args``: ``max_env_steps`` (default 30), ``simplification`` (ScienceWorld's
simplifications, default ``easy``).

The ``repeat_times`` episodes of a task run one after another in one simulator (its
Java process takes about 2.5 s to start; loading a task about 1.5 s more).
"""

from __future__ import annotations

import json
import re
from typing import Any

from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.conversation import Conversation
from trinity.workflows.envs import Step, TextEnv
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import rollout_args, set_reward

SYSTEM_PROMPT = (
    "You are an agent running a science experiment in a text-based virtual world.\n\n"
    "Each turn you get an observation. Reason first, inside <think> </think>, then give "
    "exactly one command inside <action> </action>. Work alone: never ask the user.\n\n"
    "Commands (OBJ is an object, LOC a room):\n"
    "  look around | look at OBJ | examine OBJ | read OBJ | inventory\n"
    "  open OBJ | close OBJ | activate OBJ | deactivate OBJ\n"
    "  pick up OBJ | move OBJ to OBJ | pour OBJ into OBJ | mix OBJ\n"
    "  use OBJ [on OBJ] | connect OBJ to OBJ | disconnect OBJ\n"
    "  teleport to LOC | focus on OBJ (marks the object the task is about)\n"
    "  wait (10 steps) | wait1 (one step)\n\n"
    "Example reply: <think>The stove is in the kitchen.</think>"
    "<action>teleport to kitchen</action>"
)
_ACTION = re.compile(r"<action>(.*?)</action>", re.S)


def parse_action(reply: str) -> str | None:
    """The command in the reply's first ``<action>`` tag, or None.

    >>> parse_action("<think>go</think><action> look around </action>")
    'look around'
    >>> parse_action("look around") is None
    True
    """
    found = _ACTION.search(reply)
    return found.group(1).strip() if found else None


def task_spec(row: dict[str, Any], prompt_key: str | None) -> dict[str, Any]:
    """``task_name``, ``var_num`` and ``jar_path`` of a row: from the JSON object in its
    ``prompt_key`` column when that column exists, else from the row's own keys."""
    spec: Any = row
    if prompt_key and prompt_key in row:
        spec = row[prompt_key]
        if isinstance(spec, str):
            try:
                spec = json.loads(spec)
            except ValueError:
                raise ValueError(
                    f"sciworld task column '{prompt_key}' must hold a JSON object with "
                    f"task_name and var_num, got {spec[:80]!r}"
                ) from None
    if not isinstance(spec, dict) or not spec.get("task_name"):
        raise KeyError(
            "a sciworld task needs 'task_name' (e.g. boil) in the JSON object of its "
            f"'{prompt_key}' column or as a column; got {spec!r:.120}"
        )
    return {
        "task_name": str(spec["task_name"]),
        "var_num": int(spec.get("var_num", 0)),
        "jar_path": spec.get("jar_path") or None,
    }


class SciWorldEnv(TextEnv):
    """One ScienceWorld task variation behind the text interface of :class:`TextEnv`;
    ``reset()`` starts another episode in the same simulator. ``close()`` stops its Java
    process."""

    def __init__(
        self, spec: dict[str, Any], max_env_steps: int = 30, simplification: str = "easy"
    ) -> None:
        from scienceworld import ScienceWorldEnv

        self.max_env_steps = max_env_steps
        # the simulator ends an episode itself past envStepLimit moves; ours ends first
        self.env = ScienceWorldEnv("", spec["jar_path"], envStepLimit=max_env_steps + 1)
        try:
            self.env.load(spec["task_name"], spec["var_num"], simplification)
        except BaseException:
            self.close()
            raise
        self.steps = 0
        self.score = 0  # the simulator's, -100..100
        self.best = 0
        self.done = False

    def reset(self) -> str:
        observation, _ = self.env.reset()
        self.steps, self.score, self.best, self.done = 0, 0, 0, False
        return f"Task Description: {self.env.get_task_description()}\nObservation:\n{observation}"

    def step(self, action: str) -> Step:
        self.steps += 1
        command = parse_action(action)
        if command is None:
            return Step(
                "Observation:\nNo command: give exactly one inside <action> </action>, "
                "for example <action>look around</action>.",
                done=False,
            )
        observation, _, done, info = self.env.step(command)
        self.score = int(info["score"])
        self.best = max(self.best, self.score)
        self.done = bool(done)
        return Step(f"Observation:\n{observation}", done=self.done)

    def rewards(self) -> dict[str, float]:
        return {"score": self.best / 100.0}

    def close(self) -> None:
        self.env.close()
        # the wheel's own close() runs again at garbage collection and writes to the
        # process's stdin while it is still alive; waiting here keeps that a no-op
        try:
            self.env._gateway.java_process.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a process that will not stop is killed
            self.env._gateway.java_process.kill()


@WORKFLOWS.register("sciworld_workflow")
class SciWorldWorkflow(Workflow):
    """ScienceWorld episodes, one experience (the whole conversation) per episode."""

    reads_prompt = False  # the task row names the experiment; the simulator describes it

    async def run_async(self) -> list[Experience]:
        args = self.task.workflow_args
        max_env_steps = int(args.get("max_env_steps", 30))
        if max_env_steps < 1:
            raise ValueError(f"workflow_args.max_env_steps must be >= 1, got {max_env_steps}")
        spec = task_spec(dict(self.task.raw), self.task.format.get("prompt_key"))
        env = SciWorldEnv(spec, max_env_steps, str(args.get("simplification", "easy")))
        try:
            experiences = [await self._episode(env) for _ in range(self.task.repeat_times)]
        finally:
            env.close()
        for run, exp in enumerate(experiences):
            exp.eid.run = run
        return experiences

    async def _episode(self, env: SciWorldEnv) -> Experience:
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": env.reset()},
        ]
        conv = Conversation(self.model, messages)
        await conv.play(env, env.max_env_steps, **rollout_args(self.task))
        exp = conv.to_experience()
        set_reward(exp, env.rewards(), "ScienceWorld")
        exp.info.update({"env_steps": env.steps, "env_done": env.done, "env_score": env.score})
        return exp
