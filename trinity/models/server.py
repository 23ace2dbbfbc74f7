"""OpenAI-compatible HTTP endpoint on the rollout engine.

Agent code written against the ``openai`` client talks to the policy being trained:
every request goes through :class:`~trinity.models.wrapper.ModelWrapper`, so with
``enable_history`` each call is recorded as experiences for training.

    POST /v1/chat/completions   messages, n, temperature, top_p, max_tokens, stop,
                                logprobs, top_logprobs, seed, stream, stream_options,
                                tools, tool_choice (+ top_k, min_tokens,
                                stop_token_ids, ignore_eos as extensions)
    POST /v1/completions        prompt (text, token ids, or a list of either)
    GET  /v1/models             the served model names

``stream=true`` answers with server-sent events in OpenAI's chunk format, sent once the
reply is sampled (:mod:`trinity.models.openai_stream`). ``tools`` are rendered through
the chat template (or the system prompt, for a template without tool support) and the
reply's ``<tool_call>{json}</tool_call>`` blocks come back as ``message.tool_calls``
with ``finish_reason: "tool_calls"`` (:mod:`trinity.models.openai_tools`). Streamed and
tool calls are recorded in the history like any other.

Besides the OpenAI fields, responses carry the token ids (``prompt_token_ids``,
``choices[].token_ids``) and the weights' ``model_version``. Logprobs follow the
engine's convention (log_softmax(logits / T), see :mod:`trinity.models.sampling`).
Without ``max_tokens`` a reply may use the rest of ``max_model_len`` (the wrapper's
max/min_response_tokens do not apply). Errors use OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}``, with a 4xx status for bad
requests (token ids outside the vocabulary and seeds or top_k beyond int64 included:
they are refused before they reach a decode batch shared with other requests); when an API key is set, requests without ``Authorization: Bearer <key>``
get 401.

    server = OpenAIServer({"policy": wrapper}, host="127.0.0.1", port=0, api_key=None)
    server.start()  # uvicorn in a daemon thread; server.base_url is http://host:port/v1

Scopes: one server can also serve other wrappers on the same engine, each under its own
path ``/scoped/<key>/v1/...`` (:meth:`OpenAIServer.add_scope`). A request to a scope
goes through that scope's wrapper, so it is recorded in that wrapper's history and
nowhere else: the explorer gives every runner its own wrapper, and a workflow's client
(whose base URL is its wrapper's scope) only ever records into its own.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

if TYPE_CHECKING:
    from trinity.models.wrapper import ModelWrapper
    from trinity.types import Experience

logger = logging.getLogger(__name__)

MAX_TOP_LOGPROBS = 20
# the engine keeps seeds and top_k in int64 tensors and generators; larger integers
# would fail the whole decode batch, other clients' requests included
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# below the engine's vocabulary too (checked per model); tokenizers decode u32 ids
TokenId = Annotated[int, Field(ge=0, lt=2**32)]


class APIError(Exception):
    """A request the server refuses, reported in OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def response(self) -> JSONResponse:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return JSONResponse({"error": error}, status_code=self.status)


# ---- request bodies ---------------------------------------------------------------------


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class _Sampling(BaseModel):
    """Fields shared by both endpoints; unknown OpenAI fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str
    n: int = Field(1, ge=1, le=128)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    stream: bool = False
    stream_options: _StreamOptions | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    # extensions (vLLM's names)
    top_k: int = Field(-1, ge=INT64_MIN, le=INT64_MAX)
    min_tokens: int = Field(0, ge=0)
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def rollout_args(self) -> dict[str, Any]:
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(self, name):
                raise APIError(400, f"{name} is not supported; leave it at 0", param=name)
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_tokens": self.max_tokens,
            "min_tokens": self.min_tokens,
            "stop": self.stop or None,
            "stop_token_ids": self.stop_token_ids or [],
            "ignore_eos": self.ignore_eos,
            "seed": self.seed,
        }


class _TextPart(BaseModel):
    type: Literal["text"]
    text: str


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_TextPart] | None = None

    def as_dict(self) -> dict[str, Any]:
        content = self.content
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        extra = {k: v for k, v in (self.model_extra or {}).items() if v not in (None, [], {})}
        return {"role": self.role, "content": content or "", **extra}


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class _Tool(BaseModel):
    type: Literal["function"]
    function: _Function


class _FunctionName(BaseModel):
    name: str


class _NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: _FunctionName


class ChatCompletionRequest(_Sampling):
    messages: list[_Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[_Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | _NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None  # accepted; every call in a reply is returned

    def tool_specs(self) -> list[dict[str, Any]]:
        """The tools to offer the model under ``tool_choice`` (see openai_tools)."""
        tools = [t.model_dump(exclude_none=True) for t in self.tools or []]
        choice = self.tool_choice
        if choice == "none":
            return []
        if isinstance(choice, _NamedToolChoice):
            named = [t for t in tools if t["function"]["name"] == choice.function.name]
            if not named:
                raise APIError(
                    400,
                    f"tool_choice names the function '{choice.function.name}', which is not "
                    f"in tools {[t['function']['name'] for t in tools]}",
                    param="tool_choice",
                )
            return named
        if choice == "required" and not tools:
            raise APIError(400, "tool_choice 'required' needs tools", param="tool_choice")
        return tools


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[TokenId] | list[list[TokenId]]
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False


# ---- app --------------------------------------------------------------------------------


def create_app(
    models: dict[str, ModelWrapper],
    api_key: str | None = None,
    scopes: dict[str, dict[str, ModelWrapper]] | None = None,
    on_reply: Callable[[str, list[Experience]], None] | None = None,
    extend: Callable[[FastAPI], None] | None = None,
) -> FastAPI:
    """The FastAPI app serving ``models`` by name at ``/v1`` and each of ``scopes`` (a
    live dict: scopes may come and go while serving) at ``/scoped/<key>/v1``.

    ``on_reply(response_id, experiences)`` is called for every unscoped completion (mode
    serve keeps them until their feedback); ``extend(app)`` adds further routes."""
    if not models:
        raise ValueError("create_app needs at least one model")
    scopes = scopes if scopes is not None else {}
    app = FastAPI(title="trinity OpenAI-compatible API", docs_url=None, redoc_url=None)

    @app.middleware("http")
    async def check_api_key(request: Request, call_next):
        if api_key is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return APIError(
                    401,
                    "missing or wrong API key: send the header 'Authorization: Bearer <key>' "
                    "with the key configured for this server",
                    code="invalid_api_key",
                ).response()
        return await call_next(request)

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        where = ".".join(loc) or "body"
        if first.get("type") == "json_invalid":
            message = f"the request body is not valid JSON: {first.get('ctx', {}).get('error', '')}"
        else:
            message = f"invalid field '{where}': {first.get('msg', 'invalid value')}"
            if "input" in first and first.get("type") != "missing":
                message += f" (got {first['input']!r:.80})"
        return APIError(400, message, param=where if loc else None).response()

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return APIError(exc.status_code, str(exc.detail), code=None).response()

    @app.exception_handler(Exception)
    async def server_error(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("request failed")
        return APIError(500, f"internal error: {exc!r}", type="server_error").response()

    def scoped(key: str) -> dict[str, ModelWrapper]:
        served = scopes.get(key)
        if served is None:
            raise APIError(
                404,
                f"nothing is served under /scoped/{key}: the wrapper it belonged to was closed "
                "(its task finished or timed out); take a new client from the workflow's model",
                code="scope_not_found",
            )
        return served

    def pick(name: str, served: dict[str, ModelWrapper]) -> ModelWrapper:
        if name not in served:
            raise APIError(
                404,
                f"the model '{name}' does not exist; this server serves {sorted(served)}",
                param="model",
                code="model_not_found",
            )
        return served[name]

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return _list_models(models)

    @app.get("/scoped/{key}/v1/models")
    async def scoped_list_models(key: str) -> dict[str, Any]:
        return _list_models(scoped(key))

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest) -> Any:
        return await _chat(body, pick(body.model, models), on_reply)

    @app.post("/scoped/{key}/v1/chat/completions")
    async def scoped_chat_completions(key: str, body: ChatCompletionRequest) -> Any:
        return await _chat(body, pick(body.model, scoped(key)))

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> Any:
        return await _complete(body, pick(body.model, models), on_reply)

    @app.post("/scoped/{key}/v1/completions")
    async def scoped_completions(key: str, body: CompletionRequest) -> Any:
        return await _complete(body, pick(body.model, scoped(key)))

    if extend is not None:
        extend(app)
    return app


def _list_models(models: dict[str, ModelWrapper]) -> dict[str, Any]:
    data = [
        {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "trinity",
            "max_model_len": wrapper.engine.max_model_len,
        }
        for name, wrapper in models.items()
    ]
    return {"object": "list", "data": data}


async def _chat(
    body: ChatCompletionRequest,
    wrapper: ModelWrapper,
    on_reply: Callable[[str, list[Experience]], None] | None = None,
) -> Any:
    args = body.rollout_args()
    _check_token_ids(args["stop_token_ids"], wrapper, "stop_token_ids")
    args["max_tokens"] = body.max_completion_tokens or body.max_tokens
    messages = [m.as_dict() for m in body.messages]
    tools = body.tool_specs()
    template_tools = None
    if tools:
        from trinity.models.openai_tools import tool_prompt

        messages, template_tools = tool_prompt(
            wrapper.tokenizer, messages, tools, wrapper.template_args
        )
    experiences = await _call(
        wrapper.achat(messages, body.n, response_limits=False, tools=template_tools, **args)
    )
    top = body.top_logprobs or 0
    choices, parts = [], []
    for i, exp in enumerate(experiences):
        logprobs = None
        if body.logprobs:
            logprobs = await asyncio.to_thread(
                _token_logprobs, wrapper, exp, top, args["temperature"]
            )
        message: dict[str, Any] = {"role": "assistant", "content": exp.response_text}
        finish_reason = exp.info["finish_reason"]
        calls = None
        if tools:
            from trinity.models.openai_tools import split_tool_calls

            allowed = {t["function"]["name"] for t in tools}
            content, found = split_tool_calls(exp.response_text, allowed)
            if found:
                message, calls = {**message, "content": content, "tool_calls": found}, found
                finish_reason = "tool_calls"
        choices.append(
            {
                "index": i,
                "message": message,
                "finish_reason": finish_reason,
                "logprobs": None if logprobs is None else {"content": logprobs},
                "token_ids": exp.response_tokens.tolist(),
            }
        )
        parts.append({"logprobs": logprobs, "tool_calls": calls, "exp": exp})
    envelope = _envelope("chat.completion", body.model, body.n, experiences, choices)
    if on_reply is not None:
        on_reply(envelope["id"], experiences)
    if not body.stream:
        return envelope
    from trinity.models.openai_stream import chat_chunks, sse_response, token_pieces

    for part in parts:
        exp = part.pop("exp")
        part["pieces"] = token_pieces(
            wrapper.tokenizer, exp.response_tokens.tolist(), exp.response_text
        )
    return sse_response(chat_chunks(envelope, parts, body.include_usage))


async def _complete(
    body: CompletionRequest,
    wrapper: ModelWrapper,
    on_reply: Callable[[str, list[Experience]], None] | None = None,
) -> Any:
    if body.echo:
        raise APIError(400, "echo=true is not supported", param="echo")
    prompts = _prompt_list(body.prompt)
    for prompt in prompts:
        if not isinstance(prompt, str):
            _check_token_ids(prompt, wrapper, "prompt")
    args = body.rollout_args()
    _check_token_ids(args["stop_token_ids"], wrapper, "stop_token_ids")
    experiences = await _call(wrapper.agenerate(prompts, body.n, response_limits=False, **args))
    choices = []
    for i, exp in enumerate(experiences):
        logprobs = None
        if body.logprobs is not None:
            entries = await asyncio.to_thread(
                _token_logprobs, wrapper, exp, body.logprobs, args["temperature"]
            )
            offsets, offset = [], 0
            for entry in entries:
                offsets.append(offset)
                offset += len(entry["token"])
            logprobs = {
                "tokens": [e["token"] for e in entries],
                "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [
                    {t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries
                ],
                "text_offset": offsets,
            }
        choices.append(
            {
                "index": i,
                "text": exp.response_text,
                "finish_reason": exp.info["finish_reason"],
                "logprobs": logprobs,
                "token_ids": exp.response_tokens.tolist(),
                "prompt_token_ids": exp.tokens[: exp.prompt_length].tolist(),
            }
        )
    envelope = _envelope("text_completion", body.model, body.n, experiences, choices)
    if on_reply is not None:
        on_reply(envelope["id"], experiences)
    if not body.stream:
        return envelope
    from trinity.models.openai_stream import completion_chunks, sse_response, token_pieces

    pieces = [
        token_pieces(wrapper.tokenizer, exp.response_tokens.tolist(), exp.response_text)
        for exp in experiences
    ]
    return sse_response(completion_chunks(envelope, pieces, body.include_usage))


async def _call(coro: Any) -> list[Experience]:
    """Await a wrapper call; the engine's and sampler's input errors become 400s."""
    from trinity.models.engine import PromptTooLongError

    try:
        return await coro
    except PromptTooLongError as err:
        raise APIError(400, str(err), param="messages", code="context_length_exceeded") from None
    except ValueError as err:
        raise APIError(400, str(err)) from None


def _prompt_list(prompt: str | list[str] | list[int] | list[list[int]]) -> list[Any]:
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise APIError(400, "prompt must not be empty", param="prompt")
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    return list(prompt)


def _check_token_ids(ids: list[int], wrapper: ModelWrapper, param: str) -> None:
    """Token ids must lie in the model's vocabulary: the engine would index with them."""
    vocab = getattr(wrapper.engine, "vocab_size", None)  # a remote engine's server checks
    outside = [t for t in ids if vocab is not None and t >= vocab]
    if outside:
        raise APIError(
            400, f"token id {outside[0]} is outside the vocabulary [0, {vocab})", param=param
        )


def _token_logprobs(
    wrapper: ModelWrapper, exp: Experience, top: int, temperature: float
) -> list[dict[str, Any]]:
    """One OpenAI logprob entry per generated token, with ``top`` alternatives each."""
    decode = wrapper.tokenizer.decode
    response = exp.response_tokens.tolist()
    alternatives: list[list[tuple[int, float]]] = [[] for _ in response]
    if top > 0:
        alternatives = wrapper.top_logprobs(
            exp.tokens.tolist(), exp.prompt_length, top, temperature
        )
    entries = []
    for token, logprob, alts in zip(response, exp.logprobs.tolist(), alternatives, strict=True):
        text = decode([token])
        entries.append(
            {
                "token": text,
                "logprob": logprob,
                "bytes": list(text.encode("utf-8")),
                "top_logprobs": [
                    {
                        "token": decode([t]),
                        "logprob": lp,
                        "bytes": list(decode([t]).encode("utf-8")),
                    }
                    for t, lp in alts
                ],
            }
        )
    return entries


def _envelope(
    kind: str, model: str, n: int, experiences: list[Experience], choices: list[dict[str, Any]]
) -> dict[str, Any]:
    # n samples per prompt, prompts in order: count each prompt once
    prompt_tokens = sum(e.prompt_length for e in experiences[::n])
    completion_tokens = sum(e.response_length for e in experiences)
    return {
        "id": f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "prompt_token_ids": experiences[0].tokens[: experiences[0].prompt_length].tolist(),
        "model_version": experiences[0].model_version,
    }


# ---- running it -------------------------------------------------------------------------


class OpenAIServer:
    """uvicorn serving :func:`create_app` in a daemon thread.

    Args:
        models: served model name -> wrapper.
        host: address to bind; 127.0.0.1 keeps it on this machine.
        port: port to bind; 0 picks a free one (read it back from ``port``).
        api_key: when set, every request must send ``Authorization: Bearer <api_key>``.
        on_reply, extend: see :func:`create_app`.
    """

    def __init__(
        self,
        models: dict[str, ModelWrapper],
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        on_reply: Callable[[str, list[Experience]], None] | None = None,
        extend: Callable[[FastAPI], None] | None = None,
    ) -> None:
        self.models = models
        self.on_reply = on_reply
        self.extend = extend
        self.host = host
        self.port = port
        self.api_key = api_key or None
        self.scopes: dict[str, dict[str, ModelWrapper]] = {}
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/v1"

    def add_scope(self, models: dict[str, ModelWrapper]) -> str:
        """Serve ``models`` under a new path of their own; returns its base URL,
        ``http://host:port/scoped/<key>/v1`` (the key is random, so scopes never collide)."""
        key = secrets.token_hex(8)
        self.scopes[key] = models
        return self.scoped_base_url(key)

    def scoped_base_url(self, key: str) -> str:
        return self.base_url.removesuffix("/v1") + f"/scoped/{key}/v1"

    def remove_scope(self, base_url: str) -> None:
        """Stop serving the scope whose base URL :meth:`add_scope` returned."""
        key = base_url.removesuffix("/v1").rsplit("/", 1)[-1]
        self.scopes.pop(key, None)

    def start(self, timeout: float = 30.0) -> OpenAIServer:
        """Bind the port and serve in the background; returns once requests are accepted."""
        import uvicorn

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as err:
            sock.close()
            raise OSError(
                f"cannot serve the OpenAI API on {self.host}:{self.port} ({err.strerror}); "
                "choose another explorer.rollout_model.openai_api_port, or 0 for any free port"
            ) from None
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(self.models, self.api_key, self.scopes, self.on_reply, self.extend),
            log_level="warning",
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="openai-api", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the OpenAI API server on {self.host}:{self.port} did not start"
                )
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> OpenAIServer:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
