"""The AgentScope ReAct agent's tool round trip, against a real HTTP endpoint that answers
with hand-made chat completions: the first asks for the calculator, the second calls
AgentScope's ``generate_response`` with the final result."""

from __future__ import annotations

import asyncio
import json

import pytest
from http_testing import json_server

pytest.importorskip("agentscope")

from trinity.rewards.math import math_boxed_reward  # noqa: E402
from trinity.workflows.agentscope_adapter import agent_function  # noqa: E402
from trinity.workflows.agentscope_react import (  # noqa: E402
    final_answer,
    gsm8k_truth,
    react,
    toolkit,
)
from trinity.workflows.registry import WORKFLOWS  # noqa: E402


def _completion(name: str, arguments: dict, content: str = "") -> dict:
    call = {
        "id": f"call_{name}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    message = {"role": "assistant", "content": content, "tool_calls": [call]}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "canned",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


REPLIES = [
    _completion("calculator", {"expression": "6 * 7"}),
    # with text beside the finishing call, the agent stops here
    _completion("generate_response", {"result": "6 * 7 = \\boxed{42}"}, "Done."),
]


@pytest.fixture
def canned_endpoint():
    """``(base_url, requests)``: an OpenAI chat endpoint on 127.0.0.1 replying REPLIES in turn."""
    requests: list[dict] = []

    def answer(path, headers, body) -> tuple[int, dict]:
        requests.append(body)
        return 200, REPLIES[min(len(requests), len(REPLIES)) - 1]

    with json_server(answer) as url:
        yield f"{url}/v1", requests


def test_react_agent_runs_the_calculator_and_returns_the_structured_result(
    canned_endpoint,
) -> None:
    from agentscope.model import OpenAIChatModel

    base_url, requests = canned_endpoint
    model = OpenAIChatModel(
        model_name="canned", api_key="EMPTY", stream=False, client_kwargs={"base_url": base_url}
    )
    reply = asyncio.run(
        react(model, "Solve it.", "What is 6 * 7?", toolkit(["calculator"]), 3, "the answer")
    )

    assert len(requests) == 2
    # the tools offered: ours and AgentScope's finishing function
    offered = {t["function"]["name"] for t in requests[0]["tools"]}
    assert offered == {"calculator", "generate_response"}
    assert requests[0]["tools"][0]["function"]["parameters"]["required"] == ["expression"]
    # the second request carries the calculator's result as the tool message
    [tool_message] = [m for m in requests[1]["messages"] if m["role"] == "tool"]
    assert tool_message["tool_call_id"] == "call_calculator"
    assert "42" in json.dumps(tool_message["content"])
    answer = final_answer(reply)
    assert answer == "6 * 7 = \\boxed{42}"
    assert math_boxed_reward(answer, gsm8k_truth("6 * 7 is 42\n#### 42")) == {"accuracy": 1.0}


def test_a_tool_error_is_fed_back_as_text() -> None:
    from agentscope.tool import ToolResponse

    kit = toolkit(["calculator"])
    response = kit.tools["calculator"].original_func(expression="6 / (1 - 1)")
    assert isinstance(response, ToolResponse)
    assert response.content[0]["text"].startswith("error: ")


def test_unknown_tools_and_functions_fail_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"unknown tool 'web'; valid: execute_python_code, "):
        toolkit(["web"])
    with pytest.raises(ValueError, match=r"workflow_func: cannot import 'no_such_mod\.run'"):
        agent_function("no_such_mod.run", "workflow_func")
    with pytest.raises(ValueError, match=r"workflow_args\.judge_func must name an async"):
        agent_function(None, "judge_func")


def test_upstream_names_are_registered() -> None:
    names = {
        "agentscope_workflow_adapter",
        "agentscope_workflow_adapter_v1",
        "agentscope_react_workflow",
        "agentscope_react_math_workflow",
        "as_react_workflow",
        "agentscopev0_react_math_workflow",
        "agentscope_v1_react_search_workflow",
    }
    assert names <= set(WORKFLOWS.names())
    assert WORKFLOWS.get("as_react_workflow") is WORKFLOWS.get("agentscope_react_workflow")
