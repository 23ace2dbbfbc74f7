"""``env_workflow``: a multi-turn game between the policy and a text environment.

Each of the task's ``repeat_times`` rollouts plays one episode: the environment's
opening observation is the first user message, every policy reply is an action, every
observation the next user message, until the environment is done, ``max_turns``
replies were given, or the context is full. The experience covers the whole
conversation with ``action_mask`` True only on the policy's own tokens (see
:mod:`trinity.workflows.conversation`); its reward is the environment's score.

``workflow_args``: ``env`` (registered name, default ``guess_number``), ``env_args``
(keyword arguments of the environment), ``max_turns`` (default 8).
"""

from __future__ import annotations

import asyncio

from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.conversation import Conversation
from trinity.workflows.envs import ENVIRONMENTS
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import rollout_args, set_reward


@WORKFLOWS.register("env_workflow")
class EnvWorkflow(Workflow):
    """Episodes of a registered text environment, one experience per episode."""

    reads_prompt = False  # the environment opens the conversation

    async def run_async(self) -> list[Experience]:
        args = self.task.workflow_args
        env_cls = ENVIRONMENTS.get(str(args.get("env", "guess_number")))
        max_turns = int(args.get("max_turns", 8))
        if max_turns < 1:
            raise ValueError(f"workflow_args.max_turns must be >= 1, got {max_turns}")
        episodes = [
            self._episode(
                env_cls(dict(self.task.raw), **dict(args.get("env_args") or {})), max_turns
            )
            for _ in range(self.task.repeat_times)
        ]
        experiences = await asyncio.gather(*episodes)
        for run, exp in enumerate(experiences):
            exp.eid.run = run
        return list(experiences)

    async def _episode(self, env, max_turns: int) -> Experience:
        system = self.task.format.get("system_prompt")
        messages = [{"role": "system", "content": str(system)}] if system else []
        messages.append({"role": "user", "content": env.reset()})
        conv = Conversation(self.model, messages)
        done = await conv.play(env, max_turns, **rollout_args(self.task))
        exp = conv.to_experience()
        exp.info["env_done"] = done
        set_reward(exp, env.rewards(), f"environment '{type(env).__name__}'")
        exp.metrics["turns"] = float(conv.turns)
        return exp
