"""``multi_turn_tool_workflow``: the policy may call python tools before it answers.

(Trinity-RFT's ``tool_call_workflow`` is another workflow, one reply of function calls
scored against a ToolACE row: ``trinity/workflows/tool_call.py``.)

The task row holds the question (``prompt_key``), the reference answer
(``response_key``) and the tools it may use (``tools_key``, OpenAI-style specs, each
naming a tool registered in :data:`trinity.workflows.tools.TOOLS`). The specs go to
the chat template's ``tools`` argument; a template that ignores them (it renders the
same text with and without) gets them in the system prompt instead.

Each turn, every ``<tool_call>`` in the reply is executed and the results are fed back
as ``tool`` messages; a reply without a call is the final answer, scored with the
reward function (``math_reward`` unless the taskset names another) against the
reference. The experience covers the whole exchange, action_mask True only on the
policy's tokens. ``workflow_args.max_turns`` (default 4) bounds the replies.
"""

from __future__ import annotations

import asyncio
from typing import Any

from trinity.rewards.registry import task_reward_fn
from trinity.rollout.hermes_tools import (
    parse_tool_calls,
    template_renders_tools,
    with_tool_instructions,
)
from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.conversation import Conversation
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import build_messages, rollout_args, score
from trinity.workflows.tools import run_tool_call, tool_specs


@WORKFLOWS.register("multi_turn_tool_workflow")
class ToolCallWorkflow(Workflow):
    """Question answering with tool calls, one experience per rollout."""

    async def run_async(self) -> list[Experience]:
        task = self.task
        key = task.format.get("tools_key") or "tools"
        tools = tool_specs(task.raw.get(key), f"task column '{key}' (format.tools_key)")
        max_turns = int(task.workflow_args.get("max_turns", 4))
        if max_turns < 1:
            raise ValueError(f"workflow_args.max_turns must be >= 1, got {max_turns}")
        messages = build_messages(task.raw, task.format)
        template_tools: list[dict[str, Any]] | None = tools
        if not template_renders_tools(self.model.tokenizer, tools, self.model.template_args):
            messages, template_tools = with_tool_instructions(messages, tools), None
        rollouts = [
            self._rollout(messages, template_tools, tools, max_turns)
            for _ in range(task.repeat_times)
        ]
        experiences = await asyncio.gather(*rollouts)
        for run, exp in enumerate(experiences):
            exp.eid.run = run
        return list(experiences)

    async def _rollout(self, messages, template_tools, tools, max_turns: int) -> Experience:
        allowed = {t["function"]["name"] for t in tools}
        conv = Conversation(self.model, messages, tools=template_tools)
        calls = errors = 0
        answer = ""
        while conv.turns < max_turns:
            reply = await conv.sample(**rollout_args(self.task))
            if reply is None:
                break
            answer = reply
            parsed = parse_tool_calls(reply)
            if not parsed or conv.turns == max_turns:
                break
            results = [run_tool_call(call, allowed) for call in parsed]
            calls += len(parsed)
            errors += sum(r.startswith("error:") for r in results)
            if not conv.add(*({"role": "tool", "content": r} for r in results)):
                break
        exp = conv.to_experience()
        reward_fn = task_reward_fn(self.task, "math_reward")
        score(exp, reward_fn, answer, self.task.answer, self.task, self.logger)
        exp.metrics.update(
            {"tool_calls": float(calls), "tool_errors": float(errors), "turns": float(conv.turns)}
        )
        return exp
