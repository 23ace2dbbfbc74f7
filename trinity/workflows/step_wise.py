"""``step_wise_env_workflow``: a text environment played turn by turn, one experience per
step (multi_step_grpo, gigpo).

Where ``env_workflow`` trains on the whole conversation as one sequence, here each of the
policy's replies is its own experience: the prompt is the conversation up to that turn,
the response is the reply. The steps of one episode share ``eid.run`` (the trajectory)
and are numbered by ``eid.step``; every step carries the episode's reward (the
environment's score at the end), which step_wise_grpo reads from the last step and
gigpo treats as a sparse reward. ``info["anchor_id"]`` identifies the observation the
step acted on (a CRC-32 of its text), so steps of different episodes that saw the same
observation (the opening one, or the same hint after the same guess) form GiGPO's
anchor-state groups.

``workflow_args``: ``env`` (registered name, default ``guess_number``), ``env_args``,
``max_turns`` (default 4).
"""

from __future__ import annotations

import asyncio
import zlib

from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.envs import ENVIRONMENTS
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import rollout_args, set_reward


def anchor_id(observation: str) -> int:
    """A stable non-negative id of an observation's text."""
    return zlib.crc32(observation.encode("utf-8"))


@WORKFLOWS.register("step_wise_env_workflow")
class StepWiseEnvWorkflow(Workflow):
    """Episodes of a registered text environment, one experience per policy reply."""

    reads_prompt = False  # the environment opens the conversation

    async def run_async(self) -> list[Experience]:
        args = self.task.workflow_args
        env_cls = ENVIRONMENTS.get(str(args.get("env", "guess_number")))
        max_turns = int(args.get("max_turns", 4))
        if max_turns < 1:
            raise ValueError(f"workflow_args.max_turns must be >= 1, got {max_turns}")
        env_args = dict(args.get("env_args") or {})
        episodes = await asyncio.gather(
            *(
                self._episode(env_cls(dict(self.task.raw), **env_args), max_turns)
                for _ in range(self.task.repeat_times)
            )
        )
        experiences = []
        for run, steps in enumerate(episodes):
            for exp in steps:
                exp.eid.run = run
                experiences.append(exp)
        return experiences

    async def _episode(self, env, max_turns: int) -> list[Experience]:
        system = self.task.format.get("system_prompt")
        messages = [{"role": "system", "content": str(system)}] if system else []
        observation = env.reset()
        steps: list[Experience] = []
        done = False
        for turn in range(max_turns):
            messages.append({"role": "user", "content": observation})
            (exp,) = await self.model.achat(messages, n=1, **rollout_args(self.task))
            exp.eid.step = turn
            exp.info["anchor_id"] = anchor_id(observation)
            steps.append(exp)
            reply = exp.response_text or ""
            messages.append({"role": "assistant", "content": reply})
            result = env.step(reply)
            done = result.done
            if done:
                break
            observation = result.observation
        components = env.rewards()
        for exp in steps:
            set_reward(exp, components, f"environment '{type(env).__name__}'")
            exp.info["env_done"] = done
            exp.metrics["turns"] = float(len(steps))
        return steps
