"""OpenAI-compatible HTTP endpoint on the rollout engine.

Agent code written against the ``openai`` client talks to the policy being trained:
every request goes through :class:`~trinity.rollout.wrapper.ModelWrapper`, so with
``enable_history`` each call is recorded as experiences for training.

    POST /v1/chat/completions   messages, n, temperature, top_p, max_tokens, stop,
                                logprobs, top_logprobs, seed, stream, stream_options,
                                tools, tool_choice (+ top_k, min_tokens,
                                stop_token_ids, ignore_eos as extensions)
    POST /v1/completions        prompt (text, token ids, or a list of either)
    GET  /v1/models             the served model names

``stream=true`` answers with server-sent events in OpenAI's chunk format, sent once the
reply is sampled (:mod:`trinity.rollout.openai_stream`). ``tools`` are rendered through
the chat template (or the system prompt, for a template without tool support) and the
reply's ``<tool_call>{json}</tool_call>`` blocks come back as ``message.tool_calls``
with ``finish_reason: "tool_calls"`` (:mod:`trinity.rollout.openai_tools`). Streamed and
tool calls are recorded in the history like any other.

Besides the OpenAI fields, responses carry the token ids (``prompt_token_ids``,
``choices[].token_ids``) and the weights' ``model_version``. Logprobs follow the
engine's convention (log_softmax(logits / T), see :mod:`trinity.rollout.sampling`).
Without ``max_tokens`` a reply may use the rest of ``max_model_len`` (the wrapper's
max/min_response_tokens do not apply). Errors use OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}``, with a 4xx status for bad
requests (token ids outside the vocabulary and seeds or top_k beyond int64 included:
they are refused before they reach a decode batch shared with other requests); when an API key is set, requests without ``Authorization: Bearer <key>``
get 401.

Admission control (:mod:`trinity.rollout.openai_admission`, limits from
``explorer.rollout_model.openai_api_max_*``): a body over ``max_body_bytes`` gets 413
and is never held, a request asking for more than ``max_request_tokens``
(prompts x n x max_tokens) gets 400, and one that would pass ``max_queued_rows`` rows
queued or decoding gets 429 with ``Retry-After``. Parsing the body, rendering the chat
template, tokenizing and building the reply run in worker threads, so the event loop
keeps answering (``GET /v1/models`` included) while a big request is prepared. When the
client disconnects before its reply is sent, the request is cancelled and the engine
drops its rows at its next decode step. Bound to a loopback address, the server answers
only requests whose Host names the loopback (:mod:`trinity.utils.hosts`).

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
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from trinity.rollout.openai_admission import Admission, AdmissionLimits, BodyLimit
from trinity.rollout.openai_completions import chat_completion, model_list, text_completion
from trinity.rollout.openai_requests import APIError, ChatCompletionRequest, CompletionRequest
from trinity.utils.hosts import guard_host

if TYPE_CHECKING:
    from trinity.rollout.wrapper import ModelWrapper
    from trinity.types import Experience

__all__ = ["APIError", "OpenAIServer", "create_app"]

logger = logging.getLogger(__name__)

Body = TypeVar("Body", bound=BaseModel)
# a completion route: its request body and the function answering it
_Route = tuple[type[BaseModel], Callable[..., Coroutine[Any, Any, Any]]]
_CHAT: _Route = (ChatCompletionRequest, chat_completion)
_TEXT: _Route = (CompletionRequest, text_completion)


# ---- app --------------------------------------------------------------------------------


def create_app(
    models: dict[str, ModelWrapper],
    api_key: str | None = None,
    scopes: dict[str, dict[str, ModelWrapper]] | None = None,
    on_reply: Callable[[str, list[Experience]], None] | None = None,
    extend: Callable[[FastAPI], None] | None = None,
    limits: AdmissionLimits | None = None,
    bind_host: str | None = None,
) -> FastAPI:
    """The FastAPI app serving ``models`` by name at ``/v1`` and each of ``scopes`` (a
    live dict: scopes may come and go while serving) at ``/scoped/<key>/v1``.

    ``on_reply(response_id, experiences)`` is called for every unscoped completion (mode
    serve keeps them until their feedback); ``extend(app)`` adds further routes.
    ``limits``: the admission limits (default: the config's defaults); ``bind_host``:
    the address served, whose Host header is checked when it is a loopback address."""
    if not models:
        raise ValueError("create_app needs at least one model")
    scopes = scopes if scopes is not None else {}
    limits = limits or AdmissionLimits.from_config()
    admission = Admission(limits)
    app = FastAPI(title="trinity OpenAI-compatible API", docs_url=None, redoc_url=None)
    # the last added runs first: Host, then the API key, then the body's size
    app.add_middleware(BodyLimit, limits=limits)
    if api_key is not None:
        app.add_middleware(ApiKeyGuard, api_key=api_key)
    if bind_host is not None:
        guard_host(app, bind_host)

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        return invalid_request(exc.errors()).response()

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
        return model_list(models)

    @app.get("/scoped/{key}/v1/models")
    async def scoped_list_models(key: str) -> dict[str, Any]:
        return model_list(scoped(key))

    async def answer(request: Request, route: _Route, served: dict, hook: Any) -> Any:
        body = await parse(request, route[0])
        reply = route[1](body, pick(body.model, served), hook, admission)
        return await unless_disconnected(request, reply)

    @app.post("/v1/chat/completions", openapi_extra=_body(ChatCompletionRequest))
    async def chat_completions(request: Request) -> Any:
        return await answer(request, _CHAT, models, on_reply)

    @app.post("/scoped/{key}/v1/chat/completions", openapi_extra=_body(ChatCompletionRequest))
    async def scoped_chat_completions(key: str, request: Request) -> Any:
        return await answer(request, _CHAT, scoped(key), None)

    @app.post("/v1/completions", openapi_extra=_body(CompletionRequest))
    async def completions(request: Request) -> Any:
        return await answer(request, _TEXT, models, on_reply)

    @app.post("/scoped/{key}/v1/completions", openapi_extra=_body(CompletionRequest))
    async def scoped_completions(key: str, request: Request) -> Any:
        return await answer(request, _TEXT, scoped(key), None)

    if extend is not None:
        extend(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _body(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of a route that parses ``model`` itself (see
    :func:`parse`), so the schema still describes it."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's OpenAPI schema with the request bodies' models in its components."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi
        from pydantic.json_schema import models_json_schema

        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        bodies = [(m, "validation") for m in (ChatCompletionRequest, CompletionRequest)]
        _, defs = models_json_schema(bodies, ref_template="#/components/schemas/{model}")
        schema.setdefault("components", {}).setdefault("schemas", {}).update(defs["$defs"])
        app.openapi_schema = schema
    return app.openapi_schema


class ApiKeyGuard:
    """ASGI middleware: 401 unless the request sends ``Authorization: Bearer <api_key>``.

    Plain ASGI rather than ``@app.middleware``, which would stand between the routes and
    the server's disconnect message."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers", ())).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                error = APIError(
                    401,
                    "missing or wrong API key: send the header 'Authorization: Bearer <key>' "
                    "with the key configured for this server",
                    code="invalid_api_key",
                )
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


def invalid_request(errors: list[Any]) -> APIError:
    """The 400 for a body that failed validation: its first error, in one line."""
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    where = ".".join(loc) or "body"
    if first.get("type") == "json_invalid":
        message = f"the request body is not valid JSON: {first.get('ctx', {}).get('error', '')}"
    else:
        message = f"invalid field '{where}': {first.get('msg', 'invalid value')}"
        if "input" in first and first.get("type") != "missing":
            message += f" (got {first['input']!r:.80})"
    return APIError(400, message, param=where if loc else None)


async def parse(request: Request, model: type[Body]) -> Body:
    """The request's JSON body as ``model``, parsed and validated in a worker thread (a
    body of megabytes of prompts takes the CPU for a while)."""
    raw = await request.body()
    try:
        return await asyncio.to_thread(model.model_validate_json, raw)
    except ValidationError as err:
        raise invalid_request(err.errors(include_url=False)) from None


async def unless_disconnected(request: Request, reply: Coroutine[Any, Any, Any]) -> Any:
    """Await ``reply``, cancelling it if the client disconnects first: its rows leave
    the engine's queue, or its decode batch at the next step."""
    work = asyncio.ensure_future(reply)
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not work.done():
            work.cancel()
            await asyncio.wait({work})  # until the cancellation lands (rows released)
    if not work.cancelled():
        return work.result()
    logger.info("client left before its reply: %s %s cancelled", request.method, request.url.path)
    return Response(status_code=499)  # nobody reads it


async def _disconnect(request: Request) -> None:
    """Return once the server reports that the client disconnected (the body is read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


# ---- running it -------------------------------------------------------------------------


class OpenAIServer:
    """uvicorn serving :func:`create_app` in a daemon thread.

    Args:
        models: served model name -> wrapper.
        host: address to bind; 127.0.0.1 keeps it on this machine.
        port: port to bind; 0 picks a free one (read it back from ``port``).
        api_key: when set, every request must send ``Authorization: Bearer <api_key>``.
        on_reply, extend, limits: see :func:`create_app`.
    """

    def __init__(
        self,
        models: dict[str, ModelWrapper],
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        on_reply: Callable[[str, list[Experience]], None] | None = None,
        extend: Callable[[FastAPI], None] | None = None,
        limits: AdmissionLimits | None = None,
    ) -> None:
        self.models = models
        self.on_reply = on_reply
        self.extend = extend
        self.limits = limits
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
        app = create_app(
            self.models,
            self.api_key,
            self.scopes,
            self.on_reply,
            self.extend,
            limits=self.limits,
            bind_host=self.host,
        )
        config = uvicorn.Config(
            app,
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
