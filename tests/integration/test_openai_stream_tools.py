"""``stream=true`` and ``tools`` on the OpenAI-compatible server, through the real
``openai`` client over loopback HTTP, on the real engine with the tiny model.

The tiny random model never writes a well-formed ``<tool_call>`` block, so the tool-call
tests put a scripted engine in front of it: the real engine's tokenizer and template,
and replies that are fixed token ids (the tool call an instruct model would write).
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from trinity.rollout.engine import TransformersEngine
from trinity.rollout.sampling import Sample
from trinity.rollout.server import OpenAIServer
from trinity.rollout.wrapper import ModelWrapper

NAME = "tiny-policy"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CALL_REPLY = (
    'Let me look.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=256) as eng:
        yield eng


class ScriptedEngine:
    """The real engine, except that every sample is ``reply``'s tokens (then eos)."""

    def __init__(self, engine: TransformersEngine, reply: str) -> None:
        self.engine = engine
        self.reply = reply
        self.prompts: list[list[int]] = []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    async def agenerate(self, prompts, params):
        self.prompts.extend(prompts)
        tok = self.engine.tokenizer
        ids = tok(self.reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        sample = Sample(ids, [-0.5] * len(ids), "stop", self.engine.model_version)
        return [[sample] * params.n for _ in prompts]


@pytest.fixture(scope="module")
def served(engine):
    """(client, wrapper) for the real engine."""
    model = ModelWrapper(engine, enable_history=True, name=NAME)
    with OpenAIServer({NAME: model}) as srv:
        yield openai.OpenAI(base_url=srv.base_url, api_key="EMPTY", max_retries=0), model


@pytest.fixture(scope="module")
def scripted(engine):
    """(client, wrapper, scripted engine) whose model always calls get_weather."""
    script = ScriptedEngine(engine, CALL_REPLY)
    model = ModelWrapper(script, enable_history=True, name=NAME)  # type: ignore[arg-type]
    with OpenAIServer({NAME: model}) as srv:
        yield openai.OpenAI(base_url=srv.base_url, api_key="EMPTY", max_retries=0), model, script


def test_streamed_chat_deltas_join_to_the_non_streamed_reply(served):
    client, model = served
    model.clear_history()
    request = {
        "model": NAME,
        "messages": [{"role": "user", "content": "Name three colours."}],
        "temperature": 0.0,
        "seed": 7,
        "max_tokens": 24,
    }
    whole = client.chat.completions.create(**request)
    stream = client.chat.completions.create(
        **request, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content  # the tiny model says something
    assert text == whole.choices[0].message.content
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) > 1  # sent in pieces, not in one delta
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == whole.choices[0].finish_reason and set(finish[:-1]) == {None}
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # the streamed call is recorded like the other one, same tokens
    first, second = model.extract_experience_from_history()
    assert second.tokens.tolist() == first.tokens.tolist()


def test_stream_ends_with_done_and_completions_stream_too(served, engine):
    client, model = served
    whole = client.completions.create(
        model=NAME, prompt="Once upon a time", temperature=0.0, max_tokens=12, seed=3
    )
    pieces = client.completions.create(
        model=NAME, prompt="Once upon a time", temperature=0.0, max_tokens=12, seed=3, stream=True
    )
    assert "".join(c.choices[0].text for c in pieces) == whole.choices[0].text
    raw = httpx.post(
        str(client.base_url) + "chat/completions",
        json={
            "model": NAME,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
            "n": 2,
            "stream": True,
        },
        timeout=60,
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = [line for line in raw.text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    indexes = {json.loads(e[6:])["choices"][0]["index"] for e in events[:-1]}
    assert indexes == {0, 1}


def test_tool_call_comes_back_as_tool_calls_and_is_recorded(scripted, engine):
    client, model, script = scripted
    model.clear_history()
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    reply = client.chat.completions.create(
        model=NAME, messages=messages, tools=[WEATHER], temperature=0.0
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    # SmolLM2's template ignores `tools`: the specs went into the system prompt
    prompt = engine.tokenizer.decode(script.prompts[-1])
    assert '"name": "get_weather"' in prompt and "<tool_call>" in prompt
    [exp] = model.extract_experience_from_history()
    assert exp.response_text == CALL_REPLY

    # the agent answers with the tool's result; the earlier call is shown to the model
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"},
    ]
    client.chat.completions.create(model=NAME, messages=messages, tools=[WEATHER])
    prompt = engine.tokenizer.decode(script.prompts[-1])
    assert 'Let me look.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}' in (
        prompt
    )
    assert "18 C, sunny" in prompt
    assert len(model.extract_experience_from_history()) == 1


def test_streamed_tool_call_and_tool_choice_none(scripted):
    client, _, _ = scripted
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    chunks = list(
        client.chat.completions.create(model=NAME, messages=messages, tools=[WEATHER], stream=True)
    )
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.index, tc.function.name) for tc in calls] == [(0, "get_weather")]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # with tool_choice "none" the same reply is plain content
    plain = client.chat.completions.create(
        model=NAME, messages=messages, tools=[WEATHER], tool_choice="none"
    )
    assert plain.choices[0].message.tool_calls is None
    assert plain.choices[0].message.content == CALL_REPLY
    assert plain.choices[0].finish_reason == "stop"
