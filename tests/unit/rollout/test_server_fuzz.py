"""The OpenAI-compatible server under schemathesis: requests generated from the server's
own OpenAPI schema, valid ones (positive) and ones that break it (negative), all get a
2xx or 4xx answer, and the server still answers afterwards.

The server is the real uvicorn one on 127.0.0.1 (port 0) in front of the real engine on
the tiny model; ``max_model_len`` is small so a generated ``max_tokens`` stays cheap.
Bounded: a fixed number of examples per operation and mode, no example database.
"""

from __future__ import annotations

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from trinity.rollout.engine import TransformersEngine
from trinity.rollout.server import OpenAIServer
from trinity.rollout.wrapper import ModelWrapper

NAME = "tiny-policy"
MAX_MODEL_LEN = 64
MAX_TOKENS = 8
TIMEOUT_S = 60
EXAMPLES = 25  # requests per operation and mode


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with TransformersEngine(
        str(tiny_model_dir), dtype="float32", max_model_len=MAX_MODEL_LEN
    ) as engine:
        wrapper = ModelWrapper(engine, name=NAME)
        with OpenAIServer({NAME: wrapper}, host="127.0.0.1", port=0) as srv:
            yield srv


@pytest.fixture(scope="module")
def scope_key(server) -> str:
    """The path key of a live scope serving the same wrapper."""
    return server.add_scope(server.models).removesuffix("/v1").rsplit("/", 1)[-1]


@pytest.fixture(scope="module")
def schema(server):
    root = server.base_url.removesuffix("/v1")
    return schemathesis.openapi.from_url(f"{root}/openapi.json")


def _operations() -> list[tuple[str, str, GenerationMode]]:
    """(path, method, mode) of every operation; negative only where there is input to break."""
    from trinity.rollout.server import create_app

    spec = create_app({NAME: object()}).openapi()  # type: ignore[dict-item]
    cases = []
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            cases.append((path, method, GenerationMode.POSITIVE))
            if operation.get("requestBody"):  # a path's {key} is any string: nothing to break
                cases.append((path, method, GenerationMode.NEGATIVE))
    return cases


def _cheap(body: dict, supported_only: bool) -> None:
    """Name the served model and ask for few short samples of few non-empty prompts: the
    engine's own tests cover long and wide batches, here each request should take
    milliseconds.
    ``supported_only`` drops the options the server refuses (echo, penalties)."""
    body["model"] = NAME
    if supported_only:
        for key in ("echo", "frequency_penalty", "presence_penalty"):
            body.pop(key, None)
    if isinstance(body.get("n"), int | float) and not isinstance(body["n"], bool):
        body["n"] = min(body["n"], 4)
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(body.get(key), int | float) and not isinstance(body[key], bool):
            body[key] = min(body[key], MAX_TOKENS)
    if body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body["max_tokens"] = MAX_TOKENS
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        prompt = body["prompt"] = prompt[:3]
    # an empty prompt ('', [] or an empty item) has no token to start from and gets a 400;
    # hypothesis draws them often, so a live request asks about something
    if prompt in ("", []) or (isinstance(prompt, list) and any(p in ("", []) for p in prompt)):
        body["prompt"] = "Hi"


@pytest.mark.parametrize(("path", "method", "mode"), _operations())
def test_generated_requests_never_get_a_server_error(server, scope_key, schema, path, method, mode):
    operation = schema[path][method.upper()]
    live_scope = {"key": scope_key} if "{key}" in path else None
    # most requests name the served model (and a live scope) so they reach the engine;
    # the rest keep the generated names, which must get a 404
    live = operation.as_strategy(mode, path_parameters=live_scope)
    generated = operation.as_strategy(mode)
    root = server.base_url.removesuffix("/v1")
    session = requests.Session()
    seen: dict[int, int] = {}
    samples: dict[int, str] = {}  # a response of each status and its request, for failures

    @settings(
        max_examples=EXAMPLES,
        deadline=None,  # each request has TIMEOUT_S, and a timeout fails the test
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def check(data):
        choice = data.draw(st.integers(0, 3), label="choice")  # 3: names as generated
        case = data.draw(live if choice < 3 else generated, label="case")
        if choice < 3 and mode is GenerationMode.POSITIVE and isinstance(case.body, dict):
            _cheap(case.body, supported_only=choice < 2)
        try:
            response = case.call(base_url=root, session=session, timeout=TIMEOUT_S)
        except requests.RequestException as err:
            raise AssertionError(
                f"no answer ({err!r}) to {case.method} {case.formatted_path} "
                f"with body {case.body!r:.500}"
            ) from None
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        samples.setdefault(response.status_code, f"{response.text[:300]} <- {case.body!r:.300}")
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} -> {response.status_code}: "
            f"{response.text[:500]}\nbody: {case.body!r:.500}"
        )

    check()
    # the server is alive and still serves a valid request
    answer = httpx.get(f"{server.base_url}/models", timeout=10)
    assert answer.status_code == 200 and answer.json()["data"][0]["id"] == NAME
    if mode is GenerationMode.POSITIVE:  # the generated requests did reach the engine
        assert any(200 <= status < 300 for status in seen), (seen, samples)


# Found by the run above: each was a 500 (and the engine-side ones failed the whole decode
# batch, other clients' requests included) before the request models bounded them.
@pytest.mark.parametrize(
    ("path", "fields", "param"),
    [
        ("/completions", {"prompt": [-1]}, "prompt"),
        ("/completions", {"prompt": [[5, 2**40]]}, "prompt"),
        ("/completions", {"prompt": [[5, 49152]]}, "prompt"),
        (
            "/completions",
            {"prompt": "hi", "stop_token_ids": [49152], "min_tokens": 2},
            "stop_token_ids",
        ),
        ("/chat/completions", {"stop_token_ids": [10**6], "min_tokens": 2}, "stop_token_ids"),
        ("/chat/completions", {"seed": 2**64}, "seed"),
        ("/chat/completions", {"top_k": 2**63}, "top_k"),
    ],
)
def test_out_of_range_integers_are_refused_with_400(server, path, fields, param):
    body = {"model": NAME, "max_tokens": 2, **fields}
    if path == "/chat/completions":
        body["messages"] = [{"role": "user", "content": "hi"}]
    response = httpx.post(server.base_url + path, json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] is not None and error["param"].startswith(param)
