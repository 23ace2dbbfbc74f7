"""Tool calling on the OpenAI-compatible endpoint: tools into the prompt, calls out of the reply.

A request's ``tools`` go to the chat template's ``tools`` argument. A template that
ignores them (SmolLM2's renders the same text with and without) gets the specs and the
call syntax in the system prompt instead, as ``multi_turn_tool_workflow`` does, and the
assistant messages' earlier ``tool_calls`` are written back into their content in that
syntax so the model reads its own calls. The model calls a tool by writing
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes / Qwen templates'
format); :func:`split_tool_calls` turns those blocks into OpenAI ``tool_calls``.

``tool_choice``: ``"none"`` renders no tools and parses nothing; ``"auto"`` and
``"required"`` render all of them; a named function renders only that one. Decoding is
not constrained, so ``"required"`` and a named choice are requests to the model, not
guarantees: a reply without a call comes back as plain content.

    messages, template_tools = tool_prompt(tokenizer, messages, tools, template_args)
    content, calls = split_tool_calls(reply_text)  # calls: OpenAI tool_call dicts
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from trinity.rollout.hermes_tools import (
    CALL_BLOCK,
    parse_call,
    template_renders_tools,
    with_tool_instructions,
    write_call,
)


def tool_prompt(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    template_args: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages to render and the ``tools`` to pass the template (None: none).

    With a template that renders tools, both are returned unchanged; otherwise the
    instructions join the system prompt and earlier calls join their message's content.
    """
    if template_renders_tools(tokenizer, tools, template_args):
        return messages, tools
    return with_tool_instructions([_calls_as_text(m) for m in messages], tools), None


def _calls_as_text(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message's ``tool_calls`` appended to its content as call blocks."""
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(calls, list):
        return message
    blocks = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError:
                pass  # the model wrote it so; show it as it was
        blocks.append(write_call(function.get("name"), arguments))
    rest = {k: v for k, v in message.items() if k != "tool_calls"}
    rest["content"] = "\n".join([message["content"], *blocks] if message.get("content") else blocks)
    return rest


def split_tool_calls(
    text: str, allowed: set[str] | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """The reply's content without its well-formed call blocks, and those calls in
    OpenAI's shape (``arguments`` a JSON string). Malformed blocks, and calls of tools
    not in ``allowed``, stay in the content; content is None when nothing else is left.
    """
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    end = 0
    for match in CALL_BLOCK.finditer(text):
        call = _parse(match.group(1), allowed)
        if call is None:
            continue
        kept.append(text[end : match.start()])
        end = match.end()
        calls.append(call)
    kept.append(text[end:])
    content = "".join(kept).strip() if calls else text
    return (content or None) if calls else content, calls


def _parse(block: str, allowed: set[str] | None) -> dict[str, Any] | None:
    call = parse_call(block)
    if call.error or (allowed is not None and call.name not in allowed):
        return None
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
    }
