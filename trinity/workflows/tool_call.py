"""``tool_call_workflow`` (also ``toolcall_workflow``): single-turn function calling on
ToolACE-style rows (Tool-N1).

Tool-N1 (Zhang et al., arXiv:2505.00024) trains a model to emit the right function calls
for a conversation: one reply, scored by rule, with no tool actually run. A row holds

- ``tools``: the function definitions (a JSON list, or its text), each
  ``{"name", "description", "parameters"}``;
- ``raw_system``: the system prompt;
- ``conversations``: the dialogue so far, a list of ``{"from", "value"}`` with ``from``
  one of human/user, gpt/assistant, observation/tool, function_call;
- ``answer``: the expected calls, a JSON list (or its text) of ``{"name", "arguments"}``.

The prompt is the system prompt followed by the tool definitions and the reply format
(reason inside ``<think> </think>``, then the calls as a JSON list inside
``<tool_call> </tool_call>``), then the conversation. A reply earns 1 (component
``accuracy``) when it reasons exactly once before its calls and its last
``<tool_call>`` block holds the expected calls (same names and arguments, in any
order); otherwise 0. A taskset that names a reward function gets that instead
(called with the reply and the ``answer`` column).

Both names are Trinity-RFT's for this workflow (``toolcall_workflow`` until its registry
was renamed, ``tool_call_workflow`` since), with its row format and reward; the multi-turn
workflow that runs registered tools is ``multi_turn_tool_workflow``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from trinity.rewards.registry import task_reward_fn
from trinity.rollout.hermes_tools import call_blocks
from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import rollout_args, score

TOOL_PROMPT = (
    "\n\n# Tools\n\n<tools>\n{tools}\n</tools>\n\n"
    "In every reply you MUST:\n"
    "1. reason about the request inside <think> </think> tags;\n"
    "2. then give the function calls as a JSON list inside <tool_call> </tool_call> tags: "
    '<tool_call>[{{"name": <function name>, "arguments": <arguments object>}}, ...]'
    "</tool_call>\n"
    "Put the reasoning and the calls in one reply, and give every argument its correct type."
)
ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "observation": "tool",
    "tool": "tool",
    "function_call": "assistant",
}


def _json(value: Any, what: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{what} is not valid JSON: {exc}") from None
    return value


def toolace_messages(row: dict[str, Any]) -> list[dict[str, str]]:
    """The chat messages of a ToolACE row (see the module docstring)."""
    for key in ("tools", "conversations"):
        if key not in row:
            raise KeyError(
                f"toolcall_workflow needs a '{key}' column; the row's columns are {sorted(row)}"
            )
    tools = _json(row["tools"], "task column 'tools'")
    specs = "\n".join(json.dumps({"type": "function", "function": t}) for t in tools)
    system = str(row.get("raw_system") or "") + TOOL_PROMPT.format(tools=specs)
    messages = [{"role": "system", "content": system}]
    for turn in row["conversations"]:
        speaker = turn.get("from")
        if speaker not in ROLES:
            raise ValueError(f"conversation turn from '{speaker}'; expected one of {list(ROLES)}")
        value = turn.get("value")
        content = value if isinstance(value, str) else json.dumps(value)
        messages.append({"role": ROLES[speaker], "content": content})
    return messages


def _call_key(call: dict[str, Any]) -> tuple[str, str]:
    return call["name"], json.dumps(call["arguments"], sort_keys=True)


def toolcall_reward(response: str, truth: Any) -> dict[str, float]:
    """1.0 when ``response`` reasons once in ``<think>`` and then calls exactly the
    expected functions in its last ``<tool_call>`` block, else 0.0.

    >>> toolcall_reward(
    ...     '<think>look it up</think><tool_call>[{"name": "f", "arguments": {"x": 1}}]'
    ...     "</tool_call>",
    ...     '[{"name": "f", "arguments": {"x": 1}}]',
    ... )
    {'accuracy': 1.0}
    """
    expected = _json(truth, "the expected calls ('answer')")
    blocks = call_blocks(response)
    if not blocks:
        return {"accuracy": 0.0}
    try:
        calls = json.loads(blocks[-1].strip())
        if isinstance(calls, str):
            calls = json.loads(calls)
    except json.JSONDecodeError:
        return {"accuracy": 0.0}
    calls = [calls] if isinstance(calls, dict) else calls
    think_end, call_start = response.find("</think>"), response.find("<tool_call>")
    if response.count("<think>") != 1 or response.count("</think>") != 1 or think_end > call_start:
        return {"accuracy": 0.0}
    if not isinstance(calls, list) or not all(
        isinstance(c, dict) and "name" in c and "arguments" in c for c in calls
    ):
        return {"accuracy": 0.0}
    try:
        correct = Counter(map(_call_key, calls)) == Counter(map(_call_key, expected))
    except (TypeError, KeyError):
        return {"accuracy": 0.0}
    return {"accuracy": float(correct)}


@WORKFLOWS.register("tool_call_workflow")
@WORKFLOWS.register("toolcall_workflow")
class ToolCallN1Workflow(Workflow):
    """One reply of function calls per rollout, scored against the expected calls."""

    reads_prompt = False  # the prompt is built from tools, raw_system and conversations

    async def run_async(self) -> list[Experience]:
        task = self.task
        messages = toolace_messages(task.raw)
        reward_fn = task_reward_fn(task, "") if task.reward_fn else toolcall_reward
        answers = await self.model.achat(messages, n=task.repeat_times, **rollout_args(task))
        for run, exp in enumerate(answers):
            truth = task.raw.get("answer")
            score(exp, reward_fn, exp.response_text or "", truth, task, self.logger)
            exp.eid.run = run
        return answers
