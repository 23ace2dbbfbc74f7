"""Python tools a tool-call workflow can run, by the calls the model writes.

A tool is a registered function taking keyword arguments and returning text. The
model's calls are parsed by :mod:`trinity.rollout.hermes_tools`.

    >>> from trinity.rollout.hermes_tools import parse_tool_calls
    >>> [call] = parse_tool_calls(
    ...     '<tool_call>{"name": "calculator", "arguments": {"expression": "2*21"}}</tool_call>')
    >>> run_tool_call(call)
    '42'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trinity.rewards.expression import ExpressionError, evaluate
from trinity.rollout.hermes_tools import ToolCall
from trinity.utils.registry import Registry, UnknownNameError

TOOLS: Registry[Callable[..., str]] = Registry("tool")


def run_tool_call(call: ToolCall, allowed: set[str] | None = None) -> str:
    """The tool's result, or ``error: ...`` text for the model to read (never raises)."""
    if call.error:
        return f"error: {call.error}"
    if allowed is not None and call.name not in allowed:
        return f"error: unknown tool '{call.name}'; available: {', '.join(sorted(allowed))}"
    try:
        tool = TOOLS.get(call.name)
    except UnknownNameError:
        return f"error: unknown tool '{call.name}'"
    try:
        return str(tool(**call.arguments))
    except TypeError as exc:  # wrong argument names
        return f"error: bad arguments for '{call.name}': {exc}"
    except ValueError as exc:
        return f"error: {exc}"


def tool_specs(tools: Any, source: str) -> list[dict[str, Any]]:
    """Validate OpenAI-style tool specs and check each names a registered tool."""
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError(f"{source} must be a list of OpenAI-style tool dicts, got {tools!r}")
    for spec in tools:
        name = (spec.get("function") or {}).get("name") if spec.get("type") == "function" else None
        if not isinstance(name, str):
            raise ValueError(
                f'{source}: every tool must look like {{"type": "function", "function": '
                f'{{"name": ..., "parameters": {{...}}}}}}, got {spec!r}'
            )
        if name not in TOOLS:
            raise ValueError(
                f"{source}: tool '{name}' is not registered; registered tools: {TOOLS.names()}"
            )
    return tools


@TOOLS.register("calculator")
def calculator(expression: str) -> str:
    """Exact value of an arithmetic expression (integers, + - * /, parentheses)."""
    try:
        value = evaluate(str(expression), allow_negation=True).value
    except ExpressionError as exc:
        raise ValueError(str(exc)) from None
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.6g}"


CALCULATOR_SPEC = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. (12 + 7) * 3"}},
            "required": ["expression"],
        },
    },
}
