"""Admission control of the OpenAI-compatible endpoint: what one request may ask of the
server, checked before its work starts.

- Body size: :class:`BodyLimit` answers 413 when the Content-Length, or the bytes of a
  chunked body counted as they arrive, pass ``max_body_bytes``; nothing past the limit
  is kept (the rest is read and dropped, so that the client sees the answer).
- Budget: prompts x ``n`` x ``max_tokens`` (``max_model_len`` when unset) of one
  request at most ``max_request_tokens``, else 400.
- Queue: the rows (prompts x ``n``) of the requests the server admitted and the engine
  has not finished, queued or decoding, stay within ``max_queued_rows``; a request that
  would pass it gets 429 with ``Retry-After`` (400 when its rows alone exceed it, as it
  could never be admitted).

Each refusal names the limit and the config key that sets it.

    limits = AdmissionLimits.from_config(config.explorer.rollout_model)
    app.add_middleware(BodyLimit, limits=limits)
    with Admission(limits).admit(prompts=1, n=4, max_tokens=64, max_model_len=2048):
        ...  # the request's generation
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from trinity.rollout.openai_requests import APIError

# seconds a client refused for a full queue is told to wait before trying again
RETRY_AFTER_S = 1
# how much of a refused body is read and dropped so that its client sees the 413
_DRAIN_BYTES = 64 * 1024 * 1024
_DRAIN_S = 10.0


@dataclass(frozen=True)
class AdmissionLimits:
    """The endpoint's limits; ``key`` is the config path they are set under, named in
    every refusal."""

    max_body_bytes: int
    max_request_tokens: int
    max_queued_rows: int
    key: str = "explorer.rollout_model"
    max_image_bytes: int = 8 * 1024 * 1024  # decoded bytes of one image_url part
    allow_local_images: bool = False  # image_url parts may name the server's files

    @classmethod
    def from_config(cls, model: Any = None, key: str = "explorer.rollout_model") -> AdmissionLimits:
        """The limits of an ``InferenceModelConfig`` (its defaults when None)."""
        if model is None:
            from trinity.config.schema.explorer import InferenceModelConfig

            model = InferenceModelConfig()
        return cls(
            max_body_bytes=model.openai_api_max_body_bytes,
            max_request_tokens=model.openai_api_max_request_tokens,
            max_queued_rows=model.openai_api_max_queued_rows,
            key=key,
            max_image_bytes=model.openai_api_max_image_bytes,
            allow_local_images=model.openai_api_allow_local_images,
        )


class Admission:
    """Counts the rows of the admitted requests that are not finished.

    Used from the server's event loop only, so the check and the count need no lock."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self.rows = 0  # rows admitted and not finished

    @contextmanager
    def admit(
        self, prompts: int, n: int, max_tokens: int | None, max_model_len: int
    ) -> Iterator[None]:
        """Hold the request's rows while the block runs; refuse it (APIError) when it
        is over the budget or the queue is full."""
        limits = self.limits
        rows = prompts * n
        tokens = rows * min(max_tokens or max_model_len, max_model_len)
        if rows > limits.max_queued_rows:
            raise APIError(
                400,
                f"the request has {rows} rows ({prompts} prompts x n={n}), more than the "
                f"{limits.max_queued_rows} the queue holds "
                f"({limits.key}.openai_api_max_queued_rows); split it into smaller requests",
                param="n",
                code="request_too_large",
            )
        if tokens > limits.max_request_tokens:
            raise APIError(
                400,
                f"the request asks for up to {tokens} tokens ({prompts} prompts x n={n} x "
                f"{min(max_tokens or max_model_len, max_model_len)} max tokens), more than the "
                f"limit of {limits.max_request_tokens} set by "
                f"{limits.key}.openai_api_max_request_tokens; lower n, max_tokens or the prompts",
                param="max_tokens",
                code="request_too_large",
            )
        if self.rows + rows > limits.max_queued_rows:
            raise APIError(
                429,
                f"the server is busy: {self.rows} rows are queued or decoding and this "
                f"request's {rows} would pass the limit of {limits.max_queued_rows} "
                f"({limits.key}.openai_api_max_queued_rows); retry after {RETRY_AFTER_S} s",
                type="server_busy",
                code="queue_full",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self.rows += rows
        try:
            yield
        finally:
            self.rows -= rows


class BodyLimit:
    """ASGI middleware: 413 for an HTTP request body longer than ``max_body_bytes``.

    A declared Content-Length over the limit is refused before any of the body is read;
    otherwise the body is read as it arrives, counted, and refused as soon as the count
    passes the limit, so at most the limit is ever held. A body within it is handed on
    whole to the app, followed by the server's own messages (a disconnect).

    A client that sends its whole body before it reads the answer (most do, unless they
    ask ``Expect: 100-continue``) would see the connection reset instead of the 413 if the
    server closed it with the body unread; so the rest of the body, up to
    ``_DRAIN_BYTES`` and ``_DRAIN_S``, is read and dropped between the answer's head and
    its body, and the connection is closed after it."""

    def __init__(self, app: Any, limits: AdmissionLimits) -> None:
        self.app = app
        self.limit = limits.max_body_bytes
        self.key = f"{limits.key}.openai_api_max_body_bytes"

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        declared = headers.get(b"content-length")
        # a client waiting for 100 Continue sends nothing more once it has its answer
        drain = headers.get(b"expect", b"").lower() != b"100-continue"
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(f"has {int(declared)} bytes", receive, send, drain)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before the body ended
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                more = drain and message.get("more_body", False)
                await self._refuse(f"passed {self.limit} bytes", receive, send, more)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body: bytes | None = b"".join(chunks)
        chunks.clear()

        async def replay() -> dict:
            nonlocal body
            if body is None:
                return await receive()
            message, body = {"type": "http.request", "body": body, "more_body": False}, None
            return message

        await self.app(scope, replay, send)

    async def _refuse(self, what: str, receive: Any, send: Any, drain: bool) -> None:
        response = APIError(
            413,
            f"the request body {what}, more than the limit of {self.limit} bytes set by {self.key}",
            code="body_too_large",
        ).response()
        response.headers["Connection"] = "close"
        head = {"type": "http.response.start", "status": 413, "headers": response.raw_headers}
        await send(head)
        if drain:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(_drop_body(receive), _DRAIN_S)
        await send({"type": "http.response.body", "body": response.body})


async def _drop_body(receive: Any) -> None:
    """Read and drop the rest of a request body, at most ``_DRAIN_BYTES`` of it."""
    dropped = 0
    while dropped < _DRAIN_BYTES:
        message = await receive()
        dropped += len(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
