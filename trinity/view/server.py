"""The web viewer: a FastAPI app on 127.0.0.1 over one experience source.

Routes: ``/`` (a page of experiences; ``?offset=&limit=``), ``/experience/<i>`` (one
experience with its per-token log-probabilities), ``/api/experiences?offset=&limit=``
(the same data as JSON, rows that are not stored experiences under ``malformed``). The
server only reads; it binds to the loopback address so the run's data is not exposed to
the network, and answers 400 to a request whose Host header names anything but the
loopback (a web page reaching it through DNS rebinding; ``trinity.utils.hosts``). A row
that is not a stored experience is a one-line notice in its place; its own page answers
422.

    sock = bind(port=0)                         # the port: sock.getsockname()[1]
    serve(create_app(source), sock)             # until Ctrl-C / SIGTERM
"""

from __future__ import annotations

import socket
import threading
from typing import Annotated

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from trinity.utils.hosts import guard_host
from trinity.view.records import MAX_OFFSET, ExperienceSource, RowProblem, ViewSourceError
from trinity.view.render import detail_html, list_html

HOST = "127.0.0.1"
MAX_LIMIT = 500
# module-level: FastAPI resolves the handlers' (string) annotations in this namespace
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT)]


def create_app(source: ExperienceSource, default_limit: int = 20) -> FastAPI:
    """The viewer's routes over ``source``; a bad ``offset``/``limit`` answers 400."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    guard_host(app, HOST)
    lock = threading.Lock()  # handlers run in a thread pool; one database read at a time

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> PlainTextResponse:
        if any(error["loc"][0] == "path" for error in exc.errors()):  # /experience/abc
            return PlainTextResponse(f"no page {request.url.path}\n", status_code=404)
        given = ", ".join(
            f"{error['loc'][-1]}={str(error.get('input'))[:40]!r}" for error in exc.errors()
        )
        return PlainTextResponse(
            f"bad query ({given}): need integers 0 <= offset <= {MAX_OFFSET} and "
            f"1 <= limit <= {MAX_LIMIT}\n",
            status_code=400,
        )

    @app.exception_handler(ViewSourceError)
    async def unreadable(request: Request, exc: ViewSourceError) -> PlainTextResponse:
        return PlainTextResponse(f"{exc}\n", status_code=422)  # e.g. a table of other columns

    @app.get("/", response_class=HTMLResponse)
    def experience_list(offset: Offset = 0, limit: Limit = default_limit) -> str:
        with lock:
            views, total = source.page(offset, limit), source.count()
        return list_html(views, total, offset, limit, source.path)

    @app.get("/api/experiences")
    def experiences_json(offset: Offset = 0, limit: Limit = default_limit) -> dict:
        with lock:
            rows, total = source.page(offset, limit), source.count()
        return {
            "total": total,
            "offset": offset,
            "experiences": [r.to_json() for r in rows if not isinstance(r, RowProblem)],
            "malformed": [r.to_json() for r in rows if isinstance(r, RowProblem)],
        }

    @app.get("/experience/{index}", response_class=HTMLResponse)
    def experience_detail(index: int) -> Response:
        with lock:
            rows = source.page(index, 1) if 0 <= index <= MAX_OFFSET else []
            total = source.count()
        if not rows:
            return PlainTextResponse(f"no experience {index}\n", status_code=404)
        status = 422 if isinstance(rows[0], RowProblem) else 200
        return HTMLResponse(detail_html(rows[0], total), status_code=status)

    return app


def bind(port: int = 0) -> socket.socket:
    """A listening socket on 127.0.0.1:``port`` (0: any free port); raises OSError."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
        sock.listen()  # accept connections from now on, before the event loop starts
    except OSError:
        sock.close()
        raise
    return sock


def serve(app: FastAPI, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` in this thread until SIGINT or SIGTERM; closes ``sock``.

    uvicorn handles both signals while it serves, then raises the one it caught again
    with the handlers that were installed before.
    """
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
