"""Running AgentScope agents on the rollout model, and turning their calls into experiences.

An AgentScope agent talks to its model through an ``agentscope.model.OpenAIChatModel``;
here that model points at the rollout model's OpenAI-compatible endpoint. Each rollout
gets a wrapper of its own (:meth:`ModelWrapper.spawn`, history on), served under its own
path, so the calls the agent makes during that rollout, and only those, are recorded;
they become the rollout's experiences (one per model call, ``eid.step`` numbering them,
or joined into multi-turn experiences with ``merge_turns``), each given the rollout's
reward.

``agentscope`` (``pip install 'trinity-rft[agentscope]'``) is imported only when an
AgentScope workflow runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trinity.types import Experience, Task
from trinity.workflows.single_turn import rollout_args, set_reward

if TYPE_CHECKING:
    from trinity.rollout.wrapper import ModelWrapper

INSTALL_HINT = "pip install 'trinity-rft[agentscope]'"


def import_agentscope(workflow: str) -> Any:
    """The ``agentscope`` module, or an ImportError saying how to install it."""
    try:
        import agentscope
    except ImportError as exc:
        raise ImportError(
            f"workflow '{workflow}' needs the agentscope package ({INSTALL_HINT}): {exc}"
        ) from None
    return agentscope


def chat_model(model: ModelWrapper, task: Task | None = None) -> Any:
    """An AgentScope ``OpenAIChatModel`` on ``model``'s endpoint, sampling with the
    taskset's ``rollout_args`` (``max_tokens`` defaults to the model's
    ``max_response_tokens``: the endpoint bounds an unlimited reply only by the context)."""
    from agentscope.model import OpenAIChatModel

    client = model.get_openai_async_client()
    sampling = rollout_args(task) if task is not None else {}
    generate: dict[str, Any] = {k: sampling[k] for k in ("temperature", "top_p") if k in sampling}
    if "top_k" in sampling:  # not an OpenAI argument: the client sends it in the body as is
        generate["extra_body"] = {"top_k": sampling["top_k"]}
    max_tokens = sampling.get("max_tokens") or model.max_response_tokens
    if max_tokens:
        generate["max_tokens"] = int(max_tokens)
    return OpenAIChatModel(
        model_name=model.name,
        api_key=client.api_key,
        stream=False,
        client_kwargs={"base_url": str(client.base_url)},
        generate_kwargs=generate,
    )


@dataclass
class Outcome:
    """What one agent run ended with: its reward (a number, or components that sum to
    it), metrics to log on its last experience, and info for all of them."""

    reward: float | dict[str, float]
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


AgentRun = Callable[["ModelWrapper"], Awaitable[Outcome]]


async def recorded_rollouts(
    model: ModelWrapper, task: Task, run: AgentRun, merge_turns: bool = False
) -> list[Experience]:
    """Run ``run`` ``task.repeat_times`` times concurrently, each on a spawned wrapper
    whose history records its calls; returns their experiences, rewarded, in run order."""
    rollouts = await asyncio.gather(
        *(_one_rollout(model, run, i, merge_turns) for i in range(task.repeat_times))
    )
    return [exp for experiences in rollouts for exp in experiences]


async def _one_rollout(
    model: ModelWrapper, run: AgentRun, index: int, merge_turns: bool
) -> list[Experience]:
    own = model.spawn(enable_history=True)
    try:
        outcome = await run(own)
        calls = len(own.history)
        experiences = own.extract_experience_from_history(merge_turns=merge_turns)
    finally:
        own.close()
    for step, exp in enumerate(experiences):
        if isinstance(outcome.reward, dict):
            set_reward(exp, outcome.reward, "the agent's reward function")
        else:
            exp.reward = float(outcome.reward)
        exp.eid.run, exp.eid.step = index, step
        exp.info.update(outcome.info)
    if experiences:
        experiences[-1].metrics.update({"agent_calls": float(calls), **outcome.metrics})
    return experiences
