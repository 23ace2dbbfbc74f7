"""multi_turn_tool_workflow: a tiny model taught to call the calculator, through the runner pool.

The model is first trained (a few seconds) to answer the task's prompt with a
``<tool_call>`` and, once it reads the tool's result, with the final answer, so the
round trip parse -> execute -> feed back -> answer -> score runs for real. The random
tiny model checks the no-call path.
"""

from __future__ import annotations

import pytest
from workflow_testing import check_conversation, make_pool, make_task, run_task, teach

from trinity.rewards.math import math_reward
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.hermes_tools import (
    parse_tool_calls,
    template_renders_tools,
    with_tool_instructions,
)
from trinity.rollout.wrapper import ModelWrapper
from trinity.workflows.tools import CALCULATOR_SPEC

QUESTION = "What is 6 * 7? Use the calculator."
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call>'
FINAL = "The answer is 42."
ROW = {"question": QUESTION, "answer": "42", "tools": [CALCULATOR_SPEC]}


def dialogue(tokenizer) -> list[tuple[str, bool]]:
    """The exchange the workflow will build, as (text, trained) pieces."""
    messages = with_tool_instructions([{"role": "user", "content": QUESTION}], [CALCULATOR_SPEC])
    eos = tokenizer.eos_token

    def render(msgs, gen=True):
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)

    first = render(messages)
    after_call = [
        *messages,
        {"role": "assistant", "content": CALL},
        {"role": "tool", "content": "42"},
    ]
    between = render(after_call)[len(first) + len(CALL) + len(eos) :]
    return [(first, False), (CALL + eos, True), (between, False), (FINAL + eos, True)]


@pytest.fixture(scope="module")
def tool_model(tiny_model_dir, tmp_path_factory):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    # SmolLM2's template ignores `tools`: the workflow puts them in the system prompt
    assert not template_renders_tools(tokenizer, [CALCULATOR_SPEC])
    out = teach(tiny_model_dir, tmp_path_factory.mktemp("tool_model"), [dialogue(tokenizer)])
    with TransformersEngine(str(out), dtype="float32", max_model_len=512) as engine:
        yield ModelWrapper(engine)


def test_tool_call_round_trip(tool_model, log_dir):
    pool = make_pool(tool_model, log_dir)
    task = make_task(
        "multi_turn_tool_workflow",
        ROW,
        repeat_times=2,
        workflow_args={"max_turns": 3},
        rollout_args={"temperature": 0, "max_tokens": 40},
    )
    try:
        exps = run_task(pool, task, log_dir)
    finally:
        pool.close()
    assert len(exps) == 2
    for exp in exps:
        roles = [m["role"] for m in exp.messages]
        assert roles == ["system", "user", "assistant", "tool", "assistant"]
        assert "calculator" in exp.messages[0]["content"]  # the specs reached the prompt
        assert exp.messages[2]["content"] == CALL
        assert exp.messages[3]["content"] == "42"  # the calculator really ran
        assert exp.messages[4]["content"] == FINAL
        assert exp.metrics["tool_calls"] == 1 and exp.metrics["tool_errors"] == 0
        assert exp.metrics["turns"] == 2
        assert exp.metrics["reward/accuracy"] == 1.0 == exp.reward
        check_conversation(exp, tool_model.tokenizer, exp.messages)


def test_reply_without_call_is_the_answer(pool, engine, log_dir):
    task = make_task(
        "multi_turn_tool_workflow",
        ROW,
        repeat_times=2,
        rollout_args={"temperature": 1.0, "max_tokens": 8},
    )
    exps = run_task(pool, task, log_dir)
    for exp in exps:
        replies = [m["content"] for m in exp.messages if m["role"] == "assistant"]
        calls = sum(len(parse_tool_calls(r)) for r in replies)
        assert exp.metrics["tool_calls"] == calls
        assert exp.metrics["reward/accuracy"] == math_reward(replies[-1], "42")["accuracy"]
        check_conversation(exp, engine.tokenizer, exp.messages)


def test_unregistered_tool_is_a_clear_error(pool, log_dir):
    spec = {"type": "function", "function": {"name": "web_search", "parameters": {}}}
    task = make_task("multi_turn_tool_workflow", {**ROW, "tools": [spec]})
    result = pool.run_tasks([task], batch_id=0)
    assert result.failed == 1
    logs = "".join(p.read_text() for p in log_dir.glob("*.log"))
    assert "tool 'web_search' is not registered; registered tools: ['calculator']" in logs
