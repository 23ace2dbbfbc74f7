"""``agentscope_workflow_adapter`` and ``agentscope_workflow_adapter_v1``: a user's
AgentScope agent function as a workflow (Trinity-RFT's names and arguments).

The function is named by ``workflow_args.workflow_func``: a Python callable (as
AgentScope's ``tune`` hands it over) or, in YAML, the dotted path ``pkg.module.func``
of an importable async function (a ``--plugin-dir`` directory is on the import path).
It receives the task row and an AgentScope chat model on the rollout model's endpoint;
every call its agents make through that model is recorded and becomes an experience of
the rollout, with the rollout's reward (see :mod:`trinity.workflows.agentscope_runs`).

- ``agentscope_workflow_adapter``: ``await workflow_func(task, model) -> float``, the
  reward.
- ``agentscope_workflow_adapter_v1`` (AgentScope's ``tuner`` interface):
  ``await workflow_func(task, model, auxiliary_models, logger) -> WorkflowOutput``
  (``auxiliary_models`` and ``logger`` only when the function takes them by those names);
  ``auxiliary_models`` maps each ``explorer.auxiliary_models`` entry's name to a chat
  model on its endpoint (not recorded). The reward is ``WorkflowOutput.reward``, or,
  with ``workflow_args.judge_func``, ``(await judge_func(task, response, ...)).reward``
  on the workflow's ``response``; both outputs' ``metrics`` are logged on the rollout's
  last experience.

Both take ``merge_turns`` (default false): join the calls that continue one
conversation into one multi-turn experience.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from trinity.types import Experience
from trinity.workflows.agentscope_runs import (
    Outcome,
    chat_model,
    import_agentscope,
    recorded_rollouts,
)
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS

_OPTIONAL = ("auxiliary_models", "logger")  # what AgentScope's tuner passes when taken


def agent_function(value: Any, key: str) -> Callable[..., Any]:
    """``workflow_args.<key>``: a callable, or the dotted path of an importable one."""
    if callable(value):
        return value
    if not isinstance(value, str) or "." not in value.replace(":", "."):
        raise ValueError(
            f"workflow_args.{key} must name an async function as 'pkg.module.func', got {value!r}"
        )
    module, _, name = value.rpartition(":") if ":" in value else value.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"workflow_args.{key}: cannot import {value!r} ({exc})") from None
    if not callable(fn):
        raise ValueError(f"workflow_args.{key}: {value!r} is not callable")
    return fn


def _taken(fn: Callable[..., Any], available: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    return {name: value for name, value in available.items() if name in params}


@WORKFLOWS.register("agentscope_workflow_adapter")
class AgentScopeWorkflowAdapter(Workflow):
    """``workflow_func(task, model) -> reward`` once per rollout."""

    reads_prompt = False  # the function reads the row as it likes

    async def run_async(self) -> list[Experience]:
        import_agentscope("agentscope_workflow_adapter")
        fn = agent_function(self.task.workflow_args.get("workflow_func"), "workflow_func")

        async def run(model) -> Outcome:
            reward = await fn(dict(self.task.raw), chat_model(model, self.task))
            return Outcome(_number(reward, "workflow_func"))

        merge = bool(self.task.workflow_args.get("merge_turns", False))
        return await recorded_rollouts(self.model, self.task, run, merge)


@WORKFLOWS.register("agentscope_workflow_adapter_v1")
class AgentScopeWorkflowAdapterV1(Workflow):
    """``workflow_func`` (and ``judge_func``) of AgentScope's tuner once per rollout."""

    reads_prompt = False

    async def run_async(self) -> list[Experience]:
        import_agentscope("agentscope_workflow_adapter_v1")
        args = self.task.workflow_args
        workflow_fn = agent_function(args.get("workflow_func"), "workflow_func")
        judge = args.get("judge_func")
        judge_fn = agent_function(judge, "judge_func") if judge is not None else None
        auxiliary = self._auxiliary_chat_models()
        extra = {"auxiliary_models": auxiliary, "logger": self.logger}

        async def run(model) -> Outcome:
            task = dict(self.task.raw)
            output = await workflow_fn(
                task, chat_model(model, self.task), **_taken(workflow_fn, extra)
            )
            metrics = dict(getattr(output, "metrics", None) or {})
            if judge_fn is None:
                reward = getattr(output, "reward", None)
                if reward is None:
                    raise ValueError(
                        "workflow_func returned no reward and workflow_args.judge_func is "
                        "not set: return WorkflowOutput(reward=...) or name a judge_func"
                    )
            else:
                verdict = await judge_fn(
                    task, getattr(output, "response", None), **_taken(judge_fn, extra)
                )
                reward = getattr(verdict, "reward", None)
                metrics.update(getattr(verdict, "metrics", None) or {})
            return Outcome(_number(reward, "the reward"), metrics)

        merge = bool(args.get("merge_turns", False))
        return await recorded_rollouts(self.model, self.task, run, merge)

    def _auxiliary_chat_models(self) -> dict[str, Any]:
        """Each auxiliary model under its name (``auxiliary_model_<i>`` where it repeats)."""
        models: dict[str, Any] = {}
        for i, wrapper in enumerate(self.auxiliary_models):
            name = wrapper.name if wrapper.name not in models else f"auxiliary_model_{i}"
            models[name] = chat_model(wrapper)
        return models


def _number(value: Any, what: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a number, got {value!r}") from None
