"""Admission control of the OpenAI-compatible server, on a real engine (tiny model) and
a real uvicorn server on 127.0.0.1, driven by httpx: body-size limit, per-request token
budget, bounded queue, work cancelled when its client leaves, the event loop free while
a big request is prepared, and the Host-header guard."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from trinity.rollout.engine import TransformersEngine
from trinity.rollout.openai_admission import AdmissionLimits
from trinity.rollout.server import OpenAIServer
from trinity.rollout.wrapper import ModelWrapper

NAME = "tiny-policy"
KEY = "explorer.rollout_model"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=512) as eng:
        yield eng


@pytest.fixture
def model(engine):
    return ModelWrapper(engine, enable_history=True, name=NAME)


@contextlib.contextmanager
def serving(model: ModelWrapper, **limits: int) -> Iterator[str]:
    """A server on 127.0.0.1 with ``limits`` over the config's defaults; its base URL."""
    defaults = AdmissionLimits.from_config()
    values = {
        "max_body_bytes": defaults.max_body_bytes,
        "max_request_tokens": defaults.max_request_tokens,
        "max_queued_rows": defaults.max_queued_rows,
        **limits,
    }
    with OpenAIServer({NAME: model}, limits=AdmissionLimits(**values)) as server:
        yield server.base_url


def _chat(url: str, timeout: float = 60, **fields) -> httpx.Response:
    body = {"model": NAME, "messages": HI, "max_tokens": 2, **fields}
    return httpx.post(url + "/chat/completions", json=body, timeout=timeout)


def _seconds(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def test_a_body_over_the_limit_gets_413_before_it_is_read(model):
    limit = 64 * 1024
    with serving(model, max_body_bytes=limit) as url:
        text = "word " * 2_000_000  # 10 MB: many seconds of tokenizing, were it read
        body = {"model": NAME, "messages": [{"role": "user", "content": text}]}
        took, response = _seconds(
            lambda: httpx.post(url + "/chat/completions", json=body, timeout=60)
        )
        assert response.status_code == 413
        message = response.json()["error"]["message"]
        assert f"{limit} bytes" in message and f"{KEY}.openai_api_max_body_bytes" in message
        assert "\n" not in message
        assert took < 2.0

        # a chunked body declares no length: it is counted as it arrives
        def chunks() -> Iterator[bytes]:
            yield b'{"model": "tiny-policy", "messages": [{"role": "user", "content": "'
            for _ in range(100):
                yield b"word " * 2000  # 10 kB each, 1 MB in all
            yield b'"}]}'

        chunked = httpx.post(
            url + "/chat/completions",
            content=chunks(),
            headers={"Content-Type": "application/json"},
            timeout=60,
        )
        assert chunked.status_code == 413
        assert f"passed {limit} bytes" in chunked.json()["error"]["message"]
        # a body within the limit is served
        assert _chat(url).status_code == 200


def test_a_request_over_the_token_budget_gets_400(model):
    with serving(model, max_request_tokens=10_000, max_queued_rows=256) as url:
        # 1 prompt x n=64 x 200 max tokens = 12,800 tokens
        response = _chat(url, n=64, max_tokens=200)
        assert response.status_code == 400
        error = response.json()["error"]
        assert "12800" in error["message"] and "10000" in error["message"]
        assert f"{KEY}.openai_api_max_request_tokens" in error["message"]
        # without max_tokens a reply may fill max_model_len (512): 64 x 512 tokens
        assert "32768" in _chat(url, n=64, max_tokens=None).json()["error"]["message"]
        # 40,000 prompts of one token each are within the budget, not within the queue
        many = {"model": NAME, "prompt": ["hi"] * 40_000, "max_tokens": 1}
        refused = httpx.post(url + "/completions", json=many, timeout=60)
        assert refused.status_code == 400
        message = refused.json()["error"]["message"]
        assert "40000 rows" in message and f"{KEY}.openai_api_max_queued_rows" in message
        assert _chat(url, n=8, max_tokens=4).status_code == 200


def test_the_model_list_answers_while_a_big_request_is_prepared(model):
    with serving(model) as url:
        # 1.5 MB of text: seconds of tokenizing before the prompt is found too long
        text = "word " * 300_000
        body = {"model": NAME, "messages": [{"role": "user", "content": text}]}
        result: dict[str, object] = {}

        def post() -> None:
            result["took"], result["response"] = _seconds(
                lambda: httpx.post(url + "/chat/completions", json=body, timeout=120)
            )

        thread = threading.Thread(target=post)
        thread.start()
        latencies = []
        while thread.is_alive():
            took, listed = _seconds(lambda: httpx.get(url + "/models", timeout=60))
            assert listed.status_code == 200
            latencies.append(took)
            time.sleep(0.05)
        thread.join()
        assert result["response"].json()["error"]["code"] == "context_length_exceeded"
        # the list never waited for the preparation: at most a third of the request's time
        assert max(latencies) < result["took"] / 3, (max(latencies), result["took"])
        assert len(latencies) >= 3


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_disconnects_leaves_no_work_behind(model, stream):
    with serving(model) as url:
        long = {"n": 8, "ignore_eos": True, "temperature": 1.0, "stream": stream}
        # the long request's decode time, from a tenth of it
        tenth, calibration = _seconds(lambda: _chat(url, max_tokens=48, **long))
        assert calibration.status_code == 200
        model.clear_history()
        with pytest.raises(httpx.ReadTimeout):  # the client gives up after 1 s and leaves
            _chat(url, timeout=httpx.Timeout(60, read=1.0), max_tokens=480, **long)
        took, small = _seconds(lambda: _chat(url))
        assert small.status_code == 200
        # the small request waited for no more than a step of the abandoned one
        assert took < 10 * tenth / 4, (took, tenth)
        # the abandoned request was never recorded; the small one was
        [recorded] = model.extract_experience_from_history()
        assert recorded.response_tokens.tolist() == small.json()["choices"][0]["token_ids"]


def test_a_full_queue_gets_429_with_retry_after(model):
    with serving(model, max_queued_rows=8) as url:
        errors: list[BaseException] = []

        def hold() -> None:  # 8 rows decoding for seconds, until their client leaves at 2 s
            try:
                _chat(url, httpx.Timeout(60, read=2.0), n=8, max_tokens=480, ignore_eos=True)
            except httpx.ReadTimeout as err:
                errors.append(err)

        worker = threading.Thread(target=hold)
        worker.start()
        time.sleep(0.5)
        busy = _chat(url)
        assert busy.status_code == 429
        assert busy.headers["Retry-After"] == "1"
        message = busy.json()["error"]["message"]
        assert f"{KEY}.openai_api_max_queued_rows" in message and "8" in message
        assert "\n" not in message
        worker.join()
        assert errors  # the holder left; its rows were released
        assert _chat(url).status_code == 200


def test_a_foreign_host_header_gets_400(model):
    with serving(model) as url:
        port = httpx.URL(url).port
        foreign = httpx.get(url + "/models", headers={"Host": "evil.example"}, timeout=60)
        assert foreign.status_code == 400
        assert "evil.example" in foreign.text
        assert _chat(url, timeout=60).status_code == 200
        local = httpx.get(url + "/models", headers={"Host": f"localhost:{port}"}, timeout=60)
        assert local.status_code == 200
