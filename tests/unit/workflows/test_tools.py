"""Tool-call parsing and execution on hand-written replies."""

import pytest

from trinity.rollout.hermes_tools import ToolCall, parse_tool_calls
from trinity.workflows.tools import CALCULATOR_SPEC, run_tool_call, tool_specs

CALC = "calculator"


def test_parses_every_call_in_order():
    text = (
        'Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "1+2"}}</tool_call>'
        '<tool_call>\n{"name": "calculator", "arguments": "{\\"expression\\": \\"3*4\\"}"}\n</tool_call>'
    )
    calls = parse_tool_calls(text)
    assert calls == [ToolCall(CALC, {"expression": "1+2"}), ToolCall(CALC, {"expression": "3*4"})]
    assert [run_tool_call(c, {CALC}) for c in calls] == ["3", "12"]


def test_no_call():
    assert parse_tool_calls("The answer is 4.") == []
    assert parse_tool_calls("<tool_call> unterminated") == []


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("{not json}", "not valid JSON"),
        ('["calculator"]', '{"name": ..., "arguments": {...}}'),
        ('{"arguments": {}}', '{"name": ..., "arguments": {...}}'),
        ('{"name": "calculator", "arguments": [1]}', "arguments must be a JSON object"),
        ('{"name": "calculator", "arguments": "{bad"}', "arguments must be a JSON object"),
    ],
)
def test_malformed_calls_carry_an_error(block, error):
    [call] = parse_tool_calls(f"<tool_call>{block}</tool_call>")
    assert error in call.error
    assert run_tool_call(call).startswith("error: ")


@pytest.mark.parametrize(
    ("call", "result"),
    [
        (ToolCall(CALC, {"expression": "7 / 2"}), "3.5"),
        (ToolCall(CALC, {"expression": "-3 + 5"}), "2"),
        (ToolCall(CALC, {"expression": "1 / 0"}), "error: division by zero"),
        (
            ToolCall(CALC, {"expression": "__import__('os')"}),
            "error: '__import__('os')' is not allowed",
        ),
        (ToolCall(CALC, {"expr": "1"}), "error: bad arguments for 'calculator'"),
        (ToolCall("search", {"q": "x"}), "error: unknown tool 'search'; available: calculator"),
    ],
)
def test_run_tool_call(call, result):
    assert run_tool_call(call, {CALC}).startswith(result)


def test_a_registered_tool_outside_the_task_list_is_refused():
    assert run_tool_call(ToolCall(CALC, {"expression": "1"}), allowed=set()).startswith(
        "error: unknown tool"
    )


def test_tool_specs_validation():
    assert tool_specs([CALCULATOR_SPEC], "tools") == [CALCULATOR_SPEC]
    with pytest.raises(ValueError, match="must be a list of OpenAI-style tool dicts"):
        tool_specs(None, "task column 'tools'")
    with pytest.raises(ValueError, match='"type": "function"'):
        tool_specs([{"name": "calculator"}], "tools")
    with pytest.raises(ValueError, match="'grep' is not registered"):
        tool_specs([{"type": "function", "function": {"name": "grep"}}], "tools")
