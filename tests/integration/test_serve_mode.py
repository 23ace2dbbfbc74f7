"""Mode serve's component: OpenAI calls, feedback with a reward, experiences in the buffer.

In process on the tiny model with the ``openai`` client on loopback; the launch through
``trinity run`` (mode serve) only wires the engine and the configured buffer around it.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from trinity.buffer import ExperienceQueue
from trinity.explorer.serve import serve
from trinity.models.engine import TransformersEngine
from trinity.models.wrapper import ModelWrapper

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
