"""AgentScope's ReActAgent as a workflow (Trinity-RFT's names and ``workflow_args``).

Each rollout builds a ``ReActAgent`` on the rollout model's endpoint (see
:mod:`trinity.workflows.agentscope_runs`), hands it the task's question, and lets it
reason and call tools for up to ``max_turns`` model calls; the agent finishes by calling
AgentScope's ``generate_response`` tool with a structured ``result``. The endpoint parses
the model's ``<tool_call>`` blocks into OpenAI ``tool_calls``, AgentScope runs the tools,
and every model call of the rollout becomes an experience carrying its reward.

- ``agentscope_react_math_workflow`` (also ``agentscopev0_react_math_workflow`` and
  ``agentscope_reactv2_math_workflow``, Trinity-RFT's names for the same agent on
  AgentScope 0.x, whose package cannot be installed beside 1.x): the math agent, with
  ``workflow_args.tools`` (default ``[execute_python_code]``, AgentScope's tool, which
  runs the model's Python code in a subprocess on this machine; or names of
  ``trinity.workflows.tools.TOOLS``, e.g. ``calculator``). The final ``result`` is scored
  with the taskset's reward function, ``math_boxed_reward`` by default, against the
  reference (a GSM8K reference is cut to what follows ``####``).
- ``agentscope_react_workflow`` = ``as_react_workflow``: the same agent selected by
  ``workflow_args.type``: ``gsm8k`` (the only one here) with no tools unless
  ``workflow_args.tools`` names some.
- ``agentscope_v1_react_search_workflow``: a web-search agent whose tools come from a
  search MCP server started with ``npx`` (``search_client_type``: ``searxng`` with
  ``$SEARXNG_URL``, or ``tavily`` with ``$TAVILY_API_KEY``), judged by
  ``explorer.auxiliary_models[0]``; ``max_model_tokens`` drops longer experiences.
  ``trinity run`` checks for npx, the variable and the judge before starting.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from trinity.config.agentscope_needs import SEARCH_VARIABLES
from trinity.rewards.registry import task_reward_fn
from trinity.rollout.hermes_tools import ToolCall
from trinity.types import Experience
from trinity.workflows.agentscope_runs import (
    Outcome,
    chat_model,
    import_agentscope,
    recorded_rollouts,
)
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.tools import TOOLS, run_tool_call

MATH_PROMPT = (
    "You are an agent specialized in solving math problems with tools. Please solve the "
    "math problem given to you. You can use your tools to perform calculation or verify "
    "your answer. You should return your final answer within \\boxed{}."
)
SEARCH_PROMPT = (
    "You are a Web Information Seeking Master. Your task is to thoroughly seek the "
    "internet for information and provide accurate answers to questions."
)
SEARCH_PACKAGES = {"searxng": "mcp-searxng", "tavily": "tavily-mcp@latest"}  # npx packages
AGENTSCOPE_TOOLS = ("execute_python_code",)


def toolkit(names: list[str]) -> Any:
    """An AgentScope Toolkit of ``names``: AgentScope's ``execute_python_code`` or tools
    registered in ``trinity.workflows.tools.TOOLS``."""
    from agentscope import tool

    kit = tool.Toolkit()
    for name in names:
        if name in AGENTSCOPE_TOOLS:
            kit.register_tool_function(getattr(tool, name))
        elif name in TOOLS:
            kit.register_tool_function(_as_agentscope_tool(name))
        else:
            raise ValueError(
                f"workflow_args.tools: unknown tool '{name}'; valid: "
                f"{', '.join([*AGENTSCOPE_TOOLS, *TOOLS.names()])}"
            )
    return kit


def _as_agentscope_tool(name: str) -> Any:
    """A registered tool as an AgentScope tool function: same name, signature and
    docstring (AgentScope builds the JSON schema from them), returning a ToolResponse."""
    from agentscope.message import TextBlock
    from agentscope.tool import ToolResponse

    fn = TOOLS.get(name)

    @functools.wraps(fn)
    def call(**arguments: Any) -> Any:
        text = run_tool_call(ToolCall(name, arguments), {name})
        return ToolResponse(content=[TextBlock(type="text", text=text)])

    return call


def final_answer(reply: Any) -> str:
    """The agent's structured ``result``, else the text of its reply ("" for none)."""
    if reply is None:
        return ""
    metadata = getattr(reply, "metadata", None)
    if isinstance(metadata, dict) and "result" in metadata:
        return str(metadata["result"])
    return reply.get_text_content() or ""


def gsm8k_truth(truth: Any) -> str:
    """A GSM8K reference cut to what follows ``####``; others as text."""
    text = str(truth)
    return text.split("####", 1)[1].strip() if "####" in text else text


async def react(
    model: Any,
    system_prompt: str,
    question: str,
    tools: Any,
    max_turns: int,
    result_description: str,
) -> Any:
    """Run a fresh ReActAgent on ``question``; returns its reply message."""
    from agentscope.agent import ReActAgent
    from agentscope.formatter import OpenAIChatFormatter
    from agentscope.memory import InMemoryMemory
    from agentscope.message import Msg
    from pydantic import BaseModel, Field, create_model

    result = create_model(
        "FinalResult", __base__=BaseModel, result=(str, Field(description=result_description))
    )
    agent = ReActAgent(
        name="react_agent",
        sys_prompt=system_prompt,
        model=model,
        formatter=OpenAIChatFormatter(),
        toolkit=tools,
        memory=InMemoryMemory(),
        max_iters=max_turns,
    )
    agent.set_console_output_enabled(False)  # the runner's log, not stdout, tells the run
    return await agent.reply(Msg("user", question, role="user"), structured_model=result)


def scored(reward_fn: Any, answer: str, truth: Any, workflow: Workflow) -> Outcome:
    """The rollout's outcome: ``reward_fn``'s components, or reward 0 and
    ``info["reward_error"]`` when it raises (the traceback goes to the workflow's log)."""
    try:
        return Outcome(reward_fn(answer, truth))
    except Exception as exc:
        workflow.logger.exception("reward function of task %s raised", workflow.task.index)
        return Outcome(0.0, info={"reward_error": f"{type(exc).__name__}: {exc}"})


def _max_turns(args: dict[str, Any]) -> int:
    value = int(args.get("max_turns", 10))
    if value < 1:
        raise ValueError(f"workflow_args.max_turns must be >= 1, got {value}")
    return value


@WORKFLOWS.register("agentscope_reactv2_math_workflow")
@WORKFLOWS.register("agentscopev0_react_math_workflow")
@WORKFLOWS.register("agentscope_react_math_workflow")
class AgentScopeReactMathWorkflow(Workflow):
    """A ReAct math agent with tools; its final result scored by a math reward."""

    default_tools: tuple[str, ...] = ("execute_python_code",)

    async def run_async(self) -> list[Experience]:
        import_agentscope(self.task.workflow)
        args = self.task.workflow_args
        names = args.get("tools", list(self.default_tools))
        if not isinstance(names, list):
            raise ValueError(f"workflow_args.tools must be a list of tool names, got {names!r}")
        toolkit(names)  # an unknown tool fails the task before any model call
        max_turns = _max_turns(args)
        reward_fn = task_reward_fn(self.task, "math_boxed_reward")
        truth = gsm8k_truth(self.task.answer)

        async def run(model) -> Outcome:
            reply = await react(
                chat_model(model, self.task),
                MATH_PROMPT,
                self.task.prompt,
                toolkit(names),
                max_turns,
                "Your solution of the given math problem. Put your final answer in boxed "
                "format, e.g., \\boxed{42}",
            )
            return scored(reward_fn, final_answer(reply), truth, self)

        merge = bool(args.get("merge_turns", False))
        return await recorded_rollouts(self.model, self.task, run, merge)


@WORKFLOWS.register("as_react_workflow")
@WORKFLOWS.register("agentscope_react_workflow")
class AgentScopeReActWorkflow(AgentScopeReactMathWorkflow):
    """The ReAct agent of ``workflow_args.type`` (``gsm8k``)."""

    default_tools = ()

    async def run_async(self) -> list[Experience]:
        kind = self.task.workflow_args.get("type", "gsm8k")
        if kind != "gsm8k":
            raise ValueError(
                f"workflow_args.type of {self.task.workflow} is {kind!r}; valid: 'gsm8k' "
                "(Trinity-RFT's 'email_search' needs its email database, not shipped here)"
            )
        return await super().run_async()


@WORKFLOWS.register("agentscope_v1_react_search_workflow")
class AgentScopeV1ReactSearchWorkflow(Workflow):
    """A ReAct agent with a web-search MCP server's tools, judged by an auxiliary model."""

    async def run_async(self) -> list[Experience]:
        import_agentscope(self.task.workflow)
        args = self.task.workflow_args
        kind = str(args.get("search_client_type", "searxng"))
        if kind not in SEARCH_VARIABLES:
            raise ValueError(
                f"workflow_args.search_client_type must be one of {list(SEARCH_VARIABLES)}, "
                f"got {kind!r}"
            )
        variable, package = SEARCH_VARIABLES[kind], SEARCH_PACKAGES[kind]
        if not os.environ.get(variable):
            raise ValueError(f"search_client_type {kind!r} needs ${variable} to be set")
        if not self.auxiliary_models:
            raise ValueError(f"{self.task.workflow} judges with explorer.auxiliary_models[0]")
        max_turns = _max_turns(args)
        max_model_tokens = int(args.get("max_model_tokens", 24000))
        judge = self.auxiliary_models[0]

        async def run(model) -> Outcome:
            from agentscope.mcp import StdIOStatefulClient

            client = StdIOStatefulClient(
                name=f"{kind}_mcp",
                command="npx",
                args=["-y", package],
                env={**os.environ, variable: os.environ[variable]},
            )
            tools = toolkit([])
            await client.connect()
            try:
                await tools.register_mcp_client(client)
                reply = await react(
                    chat_model(model, self.task),
                    SEARCH_PROMPT,
                    self.task.prompt,
                    tools,
                    max_turns,
                    "The final result to the initial user query",
                )
            finally:
                await client.close()
            correct = await self._judge(judge, final_answer(reply))
            return Outcome({"accuracy": float(correct)}, {"max_turns": float(max_turns)})

        experiences = await recorded_rollouts(self.model, self.task, run)
        return [e for e in experiences if len(e.tokens) <= max_model_tokens]

    async def _judge(self, judge: Any, answer: str) -> bool:
        prompt = (
            f"Judge whether the [response] to [question] is correct based on "
            f"[correct_answer].\n\n[question]: {self.task.prompt}\n\n[response]: {answer}\n\n"
            f"[correct_answer]: {self.task.answer}\n\nExplain briefly, then end with "
            '"Correctness: YES" if the response matches the correct answer (small numeric or '
            'formatting differences allowed), otherwise "Correctness: NO".'
        )
        [verdict] = await judge.achat(
            [
                {"role": "system", "content": "You evaluate correctness."},
                {"role": "user", "content": prompt},
            ]
        )
        return re.search(r"Correctness.*?YES", verdict.response_text or "", re.I) is not None
