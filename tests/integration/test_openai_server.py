"""The OpenAI-compatible server on a real engine (tiny model), driven by the real
``openai`` client and by raw HTTP: multi-turn history becomes experiences, malformed
requests get OpenAI-shaped 4xx errors, the API key is enforced."""

from __future__ import annotations

import httpx
import openai
import pytest
import torch

from trinity.rollout.engine import TransformersEngine
from trinity.rollout.server import OpenAIServer
from trinity.rollout.wrapper import ModelWrapper

KEY = "sk-test-key"
NAME = "tiny-policy"


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=512) as eng:
        yield eng


@pytest.fixture(scope="module")
def model(engine):
    return ModelWrapper(engine, enable_history=True, name=NAME)


@pytest.fixture(scope="module")
def server(model):
    with OpenAIServer({NAME: model}, host="127.0.0.1", port=0, api_key=KEY) as srv:
        yield srv


@pytest.fixture
def client(server, model):
    model.extract_experience_from_history()  # start every test with an empty history
    return openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)


def _post(server, path, body=None, content=None, key=KEY):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if content is not None:
        headers["Content-Type"] = "application/json"
    url = server.base_url + path
    return httpx.post(url, json=body, content=content, headers=headers, timeout=60)


def test_server_binds_localhost_and_lists_the_model(server, client):
    assert server.base_url.startswith("http://127.0.0.1:")
    assert [m.id for m in client.models.list().data] == [NAME]


def test_three_turn_conversation_becomes_experiences(client, model, engine):
    tok = engine.tokenizer
    messages = [{"role": "user", "content": "Hello! What is 2 + 3?"}]
    user_turns = ["Are you sure?", "Explain it again, please."]
    replies = []
    for turn in range(3):
        response = client.chat.completions.create(
            model=NAME, messages=messages, max_tokens=8, temperature=1.0, seed=turn
        )
        [choice] = response.choices
        # the prompt the server used is the chat template of the messages
        assert response.prompt_token_ids == engine.apply_chat_template(messages)
        assert choice.message.content == tok.decode(choice.token_ids, skip_special_tokens=True)
        assert choice.finish_reason in ("stop", "length")
        assert response.usage.completion_tokens == len(choice.token_ids) <= 8
        replies.append(choice)
        messages = [*messages, {"role": "assistant", "content": choice.message.content}]
        if turn < 2:
            messages.append({"role": "user", "content": user_turns[turn]})

    # one experience per call, in call order, matching what the client received
    calls = model.extract_experience_from_history(clear_history=False)
    assert len(calls) == 3
    for exp, choice in zip(calls, replies, strict=True):
        assert exp.response_tokens.tolist() == choice.token_ids
        assert bool(exp.action_mask.all())
        assert exp.logprobs.shape == (len(choice.token_ids),)
        assert bool((exp.logprobs <= 0).all())

    # merged: one sequence, action mask True exactly on the sampled reply tokens
    [conv] = model.extract_experience_from_history(merge_turns=True)
    assert model.extract_experience_from_history() == []  # cleared
    assert conv.info["turns"] == 3
    prompt = engine.apply_chat_template([messages[0]])
    assert conv.tokens[: conv.prompt_length].tolist() == prompt
    response = conv.response_tokens.tolist()
    mask = conv.action_mask.tolist()
    assert len(mask) == len(response) == conv.logprobs.numel()
    assert [t for t, m in zip(response, mask, strict=True) if m] == [
        t for c in replies for t in c.token_ids
    ]
    # the masked-out spans between replies are the template's user turns, as the
    # tokenizer writes them
    spans, current = [], []
    for token, trained in zip(response, mask, strict=True):
        if trained and current:
            spans.append(current)
            current = []
        elif not trained:
            current.append(token)
    assert len(spans) == 2 and not current
    for span, user in zip(spans, user_turns, strict=True):
        text = tok.decode(span)
        assert f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n" in text
        assert tok(text, add_special_tokens=False)["input_ids"] == span
    # sampled tokens keep the engine's logprobs; the glue carries none
    sampled = torch.cat([e.logprobs for e in calls])
    assert torch.equal(conv.logprobs[conv.action_mask], sampled)
    assert bool((conv.logprobs[~conv.action_mask] == 0).all())
    # the whole sequence reads as the chat template of the final conversation
    final = tok.apply_chat_template(messages, tokenize=False)
    assert final.startswith(tok.decode(conv.tokens.tolist()))


def test_logprobs_and_top_logprobs(client):
    response = client.chat.completions.create(
        model=NAME,
        messages=[{"role": "user", "content": "Count to three."}],
        max_tokens=5,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    [choice] = response.choices
    entries = choice.logprobs.content
    assert len(entries) == len(choice.token_ids)
    for entry in entries:
        tops = [t.logprob for t in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        # greedy: the chosen token is the most likely one
        assert entry.logprob == pytest.approx(tops[0], abs=1e-4)
        assert entry.token == entry.top_logprobs[0].token


def test_n_samples_seed_and_stop(client):
    messages = [{"role": "user", "content": "Write a long story."}]
    kwargs = dict(model=NAME, messages=messages, max_tokens=12, temperature=1.0, seed=7)
    first = client.chat.completions.create(n=3, **kwargs)
    again = client.chat.completions.create(n=3, **kwargs)
    assert len(first.choices) == 3
    assert [c.token_ids for c in first.choices] == [c.token_ids for c in again.choices]
    text = first.choices[0].message.content
    stop = next(text[i : i + 2] for i in range(2, len(text) - 1) if text[i : i + 2].strip())
    cut = client.chat.completions.create(n=1, stop=[stop], **kwargs).choices[0]
    assert cut.finish_reason == "stop"
    assert stop not in cut.message.content
    assert text.startswith(cut.message.content)


def test_completions_with_text_and_token_prompts(client, engine):
    response = client.completions.create(
        model=NAME, prompt="The sky is", max_tokens=4, n=2, temperature=1.0, logprobs=1
    )
    assert len(response.choices) == 2
    for choice in response.choices:
        assert choice.prompt_token_ids == engine.tokenizer("The sky is")["input_ids"]
        assert len(choice.logprobs.token_logprobs) == len(choice.token_ids) <= 4
        assert all(len(top) == 1 for top in choice.logprobs.top_logprobs)
    ids = engine.tokenizer("One, two,")["input_ids"]
    [choice] = client.completions.create(
        model=NAME, prompt=ids, max_tokens=3, temperature=0
    ).choices
    assert choice.prompt_token_ids == ids


@pytest.mark.parametrize(
    ("body", "content", "status", "needle"),
    [
        (None, b"{not json", 400, "not valid JSON"),
        ({"model": NAME}, None, 400, "messages"),
        ({"model": NAME, "messages": "hello"}, None, 400, "messages"),
        (
            {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "n": "x"},
            None,
            400,
            "n",
        ),
        (
            {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "temperature": -1},
            None,
            400,
            "temperature",
        ),
        ({"model": NAME, "messages": [{"role": "wizard", "content": "hi"}]}, None, 400, "role"),
        ({"model": NAME, "messages": [], "n": 1}, None, 400, "messages"),
        (
            {
                "model": NAME,
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "search"}}],
                "tool_choice": {"type": "function", "function": {"name": "calculator"}},
            },
            None,
            400,
            "calculator",
        ),
        (
            {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]},
            None,
            404,
            "tiny-policy",
        ),
    ],
)
def test_malformed_requests_get_openai_errors_and_the_server_keeps_serving(
    server, body, content, status, needle
):
    response = _post(server, "/chat/completions", body=body, content=content)
    assert response.status_code == status
    error = response.json()["error"]
    assert needle in error["message"] and error["type"] == "invalid_request_error"
    ok = _post(
        server,
        "/chat/completions",
        {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )
    assert ok.status_code == 200 and ok.json()["choices"][0]["token_ids"]


def test_too_long_prompt_and_unknown_route(server):
    long = {"model": NAME, "messages": [{"role": "user", "content": "word " * 600}]}
    response = _post(server, "/chat/completions", long)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert _post(server, "/nothing/here", {}).json()["error"]["message"] == "Not Found"


def test_api_key_is_enforced(server):
    body = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert _post(server, "/chat/completions", body, key=None).status_code == 401
    denied = _post(server, "/chat/completions", body, key="sk-wrong")
    assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(server.base_url + "/models").status_code == 401
    wrong = openai.OpenAI(base_url=server.base_url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


def test_wrapper_client_records_history(engine):
    model = ModelWrapper(engine, enable_history=True)
    try:
        client = model.get_openai_client()
        assert model.openai_base_url.startswith("http://127.0.0.1:")
        [served] = client.models.list().data
        response = client.chat.completions.create(
            model=served.id, messages=[{"role": "user", "content": "hi"}], max_tokens=3, n=2
        )
        recorded = model.extract_experience_from_history()
        assert [e.response_tokens.tolist() for e in recorded] == [
            c.token_ids for c in response.choices
        ]
    finally:
        model.close()


def test_spawned_wrappers_record_only_their_own_requests(engine):
    root = ModelWrapper(engine, name=NAME)
    first, second = root.spawn(enable_history=True), root.spawn(enable_history=True)
    try:
        root.serve_openai(api_key=KEY)
        urls = [first.openai_base_url, second.openai_base_url]
        assert len(set(urls)) == 2 and all("/scoped/" in u for u in urls)
        assert all(u.startswith(root.openai_base_url.removesuffix("/v1")) for u in urls)
        for wrapper, word in ((first, "one"), (second, "two"), (first, "three")):
            wrapper.get_openai_client().completions.create(model=NAME, prompt=word, max_tokens=2)
        assert [e.prompt_text for e in first.extract_experience_from_history()] == ["one", "three"]
        assert [e.prompt_text for e in second.extract_experience_from_history()] == ["two"]
        assert root.history == []
        # a closed wrapper's path is gone; the others keep serving
        first.close()
        gone = httpx.post(
            urls[0] + "/completions",
            json={"model": NAME, "prompt": "x", "max_tokens": 1},
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=60,
        )
        assert gone.status_code == 404
        assert gone.json()["error"]["code"] == "scope_not_found"
        assert "take a new client" in gone.json()["error"]["message"]
        assert [m.id for m in second.get_openai_client().models.list().data] == [NAME]
        unknown = httpx.get(
            urls[1] + "/models", headers={"Authorization": "Bearer wrong"}, timeout=60
        )
        assert unknown.status_code == 401
    finally:
        root.close()


def test_http_engine_gives_the_same_experiences_as_the_local_engine(
    server, model, engine, tiny_model_dir
):
    from trinity.rollout.remote import HttpEngine, RemoteModelError

    remote = ModelWrapper(HttpEngine(server.base_url, NAME, str(tiny_model_dir), api_key=KEY))
    assert remote.engine.max_model_len == engine.max_model_len
    messages = [{"role": "user", "content": "Name a colour."}]
    [here] = model.chat(messages, max_tokens=6, temperature=1.0, seed=3)
    [there] = remote.chat(messages, max_tokens=6, temperature=1.0, seed=3)
    assert torch.equal(there.tokens, here.tokens)
    assert torch.allclose(there.logprobs, here.logprobs)
    assert there.info["finish_reason"] == here.info["finish_reason"]
    pair = remote.generate([[1, 2, 3], [4, 5]], n=2, max_tokens=3)
    assert [e.tokens[: e.prompt_length].tolist() for e in pair] == [[1, 2, 3]] * 2 + [[4, 5]] * 2
    with pytest.raises(RemoteModelError, match="tiny-policy"):
        HttpEngine(server.base_url, "other", str(tiny_model_dir), api_key=KEY)
    with pytest.raises(RemoteModelError, match="401"):
        HttpEngine(server.base_url, NAME, str(tiny_model_dir))
