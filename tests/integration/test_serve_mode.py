"""Mode serve's component: OpenAI calls, feedback with a reward, experiences in the buffer.

In process on the tiny model with the ``openai`` client on loopback; the launch through
``trinity run`` (mode serve) only wires the engine and the configured buffer around it.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import torch

from trinity.buffer import ExperienceQueue
from trinity.config.schema.explorer import ServeConfig
from trinity.explorer.serve import serve
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.wrapper import ModelWrapper
from trinity.types import Experience

NAME = "policy"


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=256) as eng:
        yield eng


def test_feedback_turns_calls_into_rewarded_experiences(engine) -> None:
    buffer = ExperienceQueue(capacity=64)
    server, store = serve(ModelWrapper(engine, name=NAME), buffer, name=NAME)
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="none")
        asked = [{"role": "user", "content": "Say hi."}]
        first = client.chat.completions.create(model=NAME, messages=asked, max_tokens=4, n=2)
        second = client.chat.completions.create(model=NAME, messages=asked, max_tokens=4)
        ignored = client.completions.create(model=NAME, prompt="1 + 1 =", max_tokens=3)
        root = server.base_url.removesuffix("/v1")
        reply = httpx.post(
            f"{root}/feedback", json={"msg_ids": [first.id, second.id], "reward": 0.75}
        )
        assert reply.status_code == 200 and reply.json()["experiences"] == 3
        # an id already scored (or never returned) is refused, naming it
        again = httpx.post(f"{root}/feedback", json={"msg_ids": [first.id], "reward": 1.0})
        assert again.status_code == 404 and first.id in again.json()["error"]["message"]
        assert httpx.post(f"{root}/commit").json()["experiences"] == 3
    finally:
        server.stop()
    got = buffer.get(3, timeout=1.0)
    assert [e.reward for e in got] == [0.75, 0.75, 0.75]
    assert {e.info["msg_id"] for e in got} == {first.id, second.id}
    assert len({e.eid.task for e in got}) == 1  # one feedback: one group
    # the trained tokens are the ones the client was sent
    texts = sorted(c.message.content for c in first.choices + second.choices)
    assert sorted(e.response_text for e in got) == texts
    assert ignored.id in store.pending  # no feedback: never written


def _scored_call(server) -> str:
    """One chat completion, scored with reward 1; returns its id."""
    client = openai.OpenAI(base_url=server.base_url, api_key="none")
    reply = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4
    )
    root = server.base_url.removesuffix("/v1")
    scored = httpx.post(f"{root}/feedback", json={"msg_ids": [reply.id], "reward": 1.0})
    assert scored.status_code == 200, scored.text
    return reply.id


def test_a_full_buffer_answers_commit_with_503_and_the_server_keeps_answering(engine) -> None:
    # a real full queue: one slot, taken; nothing reads it until the end of the test
    buffer = ExperienceQueue(capacity=1)
    buffer.put([Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1)])
    settings = ServeConfig(commit_timeout=1.0)
    server, store = serve(ModelWrapper(engine, name=NAME), buffer, name=NAME, settings=settings)
    root = server.base_url.removesuffix("/v1")
    try:
        msg_id = _scored_call(server)
        with ThreadPoolExecutor(1) as pool:
            commit = pool.submit(httpx.post, f"{root}/commit", timeout=60)
            time.sleep(0.3)  # the commit now waits for room in the buffer
            start = time.monotonic()
            assert httpx.get(f"{root}/health", timeout=5).status_code == 200
            assert httpx.get(f"{server.base_url}/models", timeout=5).status_code == 200
            assert time.monotonic() - start < 2.0
            answer = commit.result()
        assert answer.status_code == 503, answer.text
        message = answer.json()["error"]["message"]
        assert "explorer.serve.commit_timeout" in message and "journal" not in message
        assert store.metrics()["rewarded_experiences"] == 1  # kept for the next commit
        # a reader makes room: the write that was waiting goes through on its own
        assert buffer.get(1, timeout=1.0)[0].info.get("msg_id") is None  # the filler
        deadline = time.monotonic() + 10
        while store.metrics()["committed_experiences"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.metrics()["committed_experiences"] == 1
        assert buffer.get(1, timeout=1.0)[0].info["msg_id"] == msg_id
    finally:
        buffer.close()  # wakes a put still waiting
        server.stop()


def test_calls_without_feedback_expire_and_are_counted(engine, caplog) -> None:
    buffer = ExperienceQueue(capacity=8)
    settings = ServeConfig(feedback_timeout=0.5)
    server, store = serve(ModelWrapper(engine, name=NAME), buffer, name=NAME, settings=settings)
    root = server.base_url.removesuffix("/v1")
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="none")
        unscored = client.completions.create(model=NAME, prompt="1 + 1 =", max_tokens=3)
        assert httpx.get(f"{root}/metrics").json()["pending_calls"] == 1
        time.sleep(0.6)
        with caplog.at_level("WARNING", logger="trinity.serve"):
            metrics = httpx.get(f"{root}/metrics").json()
        assert (metrics["pending_calls"], metrics["expired_calls"]) == (0, 1)
        assert "explorer.serve.feedback_timeout" in caplog.text
        late = httpx.post(f"{root}/feedback", json={"msg_ids": [unscored.id], "reward": 1.0})
        assert late.status_code == 404
        assert "explorer.serve.feedback_timeout" in late.json()["error"]["message"]
        # a call scored in time is not touched by the expiry
        _scored_call(server)
        time.sleep(0.6)
        assert httpx.post(f"{root}/commit").json()["experiences"] == 1
    finally:
        server.stop()
    assert store.pending == {}
