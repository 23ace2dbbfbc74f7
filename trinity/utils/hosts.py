"""Host-header checking for the HTTP servers that bind a loopback address.

A server on 127.0.0.1 is out of reach of other machines, but not of a web page in the
user's browser: DNS rebinding points a name the page controls at 127.0.0.1, and the
browser then sends that page's requests to the local server with ``Host: evil.example``.
Every loopback server of the project therefore answers only requests whose Host names
the loopback (``localhost``, ``127.0.0.1``, ``[::1]``, any port) or a name the caller
adds; anything else gets ``400 invalid Host header`` before a route runs.

    app = FastAPI()
    guard_host(app, bind_host="127.0.0.1")     # loopback only
    guard_host(app, bind_host="0.0.0.0")       # bound to every interface: no check

A server bound to another address was exposed on purpose, so it accepts any Host.
Starlette's own TrustedHostMiddleware is not used because releases before 0.40 read the
host of ``[::1]:8000`` as ``[``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

__all__ = ["HostGuard", "allowed_hosts", "guard_host", "host_of", "is_loopback"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server on this machine (``localhost`` included)."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The host part of a Host header, lower-case, without port or IPv6 brackets:
    ``"[::1]:8000"`` -> ``"::1"``, ``"LocalHost:80"`` -> ``"localhost"``."""
    header = header.strip().lower()
    if header.startswith("["):
        end = header.find("]")
        return header[1:end] if end > 0 else ""
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def allowed_hosts(bind_host: str, extra: Iterable[str] = ()) -> tuple[str, ...] | None:
    """The Host values a server bound to ``bind_host`` answers; None: any."""
    if not is_loopback(bind_host):
        return None
    names = {*LOOPBACK_NAMES, bind_host.strip("[]").lower()}
    names.update(host_of(name) for name in extra)
    return tuple(sorted(names))


class HostGuard:
    """ASGI middleware: 400 for an HTTP or websocket request whose Host is not allowed
    (a missing Host header included, as HTTP/1.1 requires one)."""

    def __init__(self, app: Any, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(allowed)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            header = ""
            for name, value in scope.get("headers", ()):
                if name == b"host":
                    header = value.decode("latin-1")
                    break
            if host_of(header) not in self.allowed:
                await self._reject(scope, receive, send, header)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _reject(scope: dict, receive: Any, send: Any, header: str) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = (
            f"invalid Host header {header[:100]!r}: this server answers only requests "
            "addressed to localhost, 127.0.0.1 or [::1]\n"
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 400,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def guard_host(app: Any, bind_host: str, extra: Iterable[str] = ()) -> None:
    """Add :class:`HostGuard` to a Starlette/FastAPI ``app`` served on ``bind_host``;
    nothing where the server is bound beyond the loopback."""
    allowed = allowed_hosts(bind_host, extra)
    if allowed is not None:
        app.add_middleware(HostGuard, allowed=allowed)
