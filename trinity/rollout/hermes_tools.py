"""Hermes tool calls: the ``<tool_call>`` blocks a model writes, and the prompt that asks for them.

A model calls a tool by writing ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
(the format of Hermes / Qwen chat templates); ``arguments`` may also be a JSON string. A
chat template that renders a request's ``tools`` teaches the model this format itself;
one that ignores them gets :data:`TOOL_INSTRUCTIONS` in the system prompt instead.

    >>> parse_tool_calls('<tool_call>{"name": "calculator", "arguments": "{}"}</tool_call>')
    [ToolCall(name='calculator', arguments={}, error=None)]
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

TOOL_INSTRUCTIONS = (
    "You can call these tools:\n<tools>\n{specs}\n</tools>\n"
    'To call one, write <tool_call>{{"name": "<tool name>", "arguments": {{...}}}}</tool_call> '
    "and wait for its result. When you know the answer, reply without a tool call."
)


@dataclass
class ToolCall:
    """One call found in a reply; ``error`` says why it cannot be run."""

    name: str
    arguments: dict[str, Any]
    error: str | None = None


def call_blocks(text: str) -> list[str]:
    """The content of every ``<tool_call>...</tool_call>`` block of ``text``, in order."""
    return CALL_BLOCK.findall(text)


def parse_call(block: str) -> ToolCall:
    """One block's call; a malformed block gives a call with ``error`` set."""
    try:
        data = json.loads(block.strip())
    except json.JSONDecodeError as exc:
        return ToolCall("", {}, f"tool call is not valid JSON ({exc.msg})")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return ToolCall("", {}, 'tool call must be {"name": ..., "arguments": {...}}')
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            arguments = None
    if not isinstance(arguments, dict):
        return ToolCall(data["name"], {}, "tool call arguments must be a JSON object")
    return ToolCall(data["name"], arguments)


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>`` block of ``text`` in order; malformed ones carry an error."""
    return [parse_call(block) for block in call_blocks(text)]


def write_call(name: Any, arguments: Any) -> str:
    """A call as the block a model would write."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def template_renders_tools(
    tokenizer: Any, tools: list[dict[str, Any]], template_args: dict[str, Any] | None = None
) -> bool:
    """True when the tokenizer's chat template writes the tool specs into the prompt.

    ``template_args`` are the variables the model's engine passes the template (e.g.
    ``enable_thinking``; ``ModelWrapper.template_args``): the probe renders as the
    prompts will.
    """
    probe = [{"role": "user", "content": "hi"}]
    args = {**(template_args or {}), "tokenize": False, "add_generation_prompt": True}
    plain = tokenizer.apply_chat_template(probe, **args)
    with_tools = tokenizer.apply_chat_template(probe, tools=tools, **args)
    return plain != with_tools


def with_tool_instructions(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``messages`` with the tool specs and call syntax added to the system prompt."""
    text = TOOL_INSTRUCTIONS.format(specs="\n".join(json.dumps(t) for t in tools))
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]
