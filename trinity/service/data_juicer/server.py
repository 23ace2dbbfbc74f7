"""The Data-Juicer service: an HTTP server that runs Data-Juicer recipes on posted rows.

    TRINITY_DATA_JUICER_TOKEN=<secret> python -m trinity.service.data_juicer.server \
        --port 5005                 # --port 0: any free port; --allow-code-operators

    GET  /health   -> {"status": "ok", "data_juicer": "<version>"}
    POST /process  {"process": [{"text_length_filter": {"min_len": 10}}], "rows": [{...}]}
                   -> {"rows": [...]}  the rows the recipe kept, filters' statistics
                      under "__dj__stats__"

Every request, ``/health`` included, needs ``Authorization: Bearer <token>`` with the
token the server read from ``TRINITY_DATA_JUICER_TOKEN`` when it started (it will not
start without one, and removes it from its environment so that operators do not inherit
it); anything else gets 401. On a loopback address a Host header that does not name the
loopback gets 400 (``trinity.utils.hosts``). A recipe gets 400 when it is not a list of
``{operator: {args}}`` or names an operator Data-Juicer lacks, 403 for an operator or
argument outside ``allowlist.py`` (operators that run code, load models or touch files;
``--allow-code-operators`` lifts it), 422 for an argument the operator does not have,
of the wrong type or out of range, or an operator that fails on the rows for its
arguments or rows; 500 for any other failure. Each message is one line naming the
operator.

It lets the data pipelines use a Data-Juicer installed in another environment or on
another machine (``service.data_juicer.server_url`` and ``token``);
``service.data_juicer.auto_start`` starts one per pipeline with a fresh token
(``client.DataJuicerService``). A recipe's operators are loaded once and kept for later
requests with the same recipe (the 8 most recent); requests are processed one at a time.

Once its socket listens it prints ``data-juicer-service-port: <port>`` on stdout, so a
caller that asked for port 0 learns the port without a race; ``--exit-with-stdin`` stops
the server when its standard input closes, i.e. when the process that started it is gone.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import socket
import threading
import time
from collections import OrderedDict
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel

from trinity.service.data_juicer.allowlist import OperatorRefused
from trinity.service.data_juicer.client import PORT_LINE, TOKEN_ENV
from trinity.service.data_juicer.runner import (
    INPUT_ERRORS,
    DataJuicerMissingError,
    DataJuicerRunner,
    OperatorArgumentError,
    OperatorFailed,
    RecipeError,
    require_data_juicer,
)
from trinity.utils.hosts import guard_host

RECIPES_KEPT = 8
SHUTDOWN_GRACE = 5  # seconds a request may still run once the server is asked to stop


class ProcessRequest(BaseModel):
    process: list[dict[str, Any]]
    rows: list[dict[str, Any]]


class ProcessResponse(BaseModel):
    rows: list[dict[str, Any]]


def create_app(
    token: str, allow_code_operators: bool = False, bind_host: str = "127.0.0.1"
) -> FastAPI:
    """The service's app: requests need ``Authorization: Bearer <token>``; without
    ``allow_code_operators`` only ``allowlist.py``'s operators run; served on
    ``bind_host`` (a loopback address: only loopback Host headers)."""
    if not token:
        raise ValueError("the Data-Juicer service needs a token")
    expected = f"Bearer {token}".encode()

    def authorized(request: Request) -> None:
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            raise HTTPException(
                401,
                "missing or wrong token: send 'Authorization: Bearer <token>' with the token "
                f"this service was started with ({TOKEN_ENV})",
                headers={"WWW-Authenticate": "Bearer"},
            )

    app = FastAPI(
        title="trinity Data-Juicer service",
        dependencies=[Depends(authorized)],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    guard_host(app, bind_host)
    runners: OrderedDict[str, DataJuicerRunner] = OrderedDict()
    lock = threading.Lock()  # one request at a time: operators and the cache are not shared-safe

    def runner_for(process: list[dict[str, Any]]) -> DataJuicerRunner:
        key = json.dumps(process, sort_keys=True)
        if key in runners:
            runners.move_to_end(key)
            return runners[key]
        try:
            runner = DataJuicerRunner(process, allow_code_operators=allow_code_operators)
        except DataJuicerMissingError:
            raise
        except RecipeError as exc:
            raise HTTPException(400, f"cannot load the recipe: {exc}") from exc
        except OperatorRefused as exc:
            raise HTTPException(403, str(exc)) from exc
        except OperatorArgumentError as exc:
            raise HTTPException(422, str(exc)) from exc
        runners[key] = runner
        if len(runners) > RECIPES_KEPT:
            runners.popitem(last=False)
        return runner

    @app.get("/health")
    def health() -> dict[str, str]:
        from importlib.metadata import version

        return {"status": "ok", "data_juicer": version("py-data-juicer")}

    @app.post("/process")
    def process(request: ProcessRequest) -> ProcessResponse:
        with lock:
            runner = runner_for(request.process)
            try:
                return ProcessResponse(rows=runner.run(request.rows))
            except OperatorFailed as exc:  # the reason goes back to the pipeline that sent the rows
                status = 422 if isinstance(exc.cause, INPUT_ERRORS) else 500
                raise HTTPException(status, str(exc)) from exc
            except Exception as exc:
                raise HTTPException(500, f"the recipe failed: {type(exc).__name__}: {exc}") from exc

    return app


def serve(
    host: str,
    port: int,
    token: str,
    allow_code_operators: bool = False,
    exit_with_stdin: bool = False,
) -> None:
    """Bind ``host:port``, print the bound port and serve until stopped."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise SystemExit(f"cannot bind {host}:{port}: {err.strerror}") from None
    sock.listen(128)  # connections made before uvicorn runs wait in the backlog
    # imported after binding, so a port in use fails at once; its import takes seconds,
    # paid before the first request
    import data_juicer.ops  # noqa: F401

    print(PORT_LINE, sock.getsockname()[1], flush=True)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(token, allow_code_operators, host),
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=SHUTDOWN_GRACE,
        )
    )
    if exit_with_stdin:
        threading.Thread(target=_exit_at_eof, args=(server,), name="stdin", daemon=True).start()
    server.run(sockets=[sock])


def _exit_at_eof(server: Any) -> None:
    # os.read, not sys.stdin.read: a reader thread would hold sys.stdin's lock, and the
    # worker processes Data-Juicer forks close sys.stdin first thing, so they would hang
    while os.read(0, 4096):
        pass
    server.should_exit = True
    time.sleep(2 * SHUTDOWN_GRACE)
    os._exit(1)  # a request still running: do not wait for it


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5005, help="0: any free port")
    parser.add_argument("--exit-with-stdin", action="store_true", help="stop when stdin closes")
    parser.add_argument(
        "--allow-code-operators",
        action="store_true",
        help="run any operator, also those outside allowlist.py that run code from the recipe",
    )
    args = parser.parse_args(argv)
    # read from the environment, never from the command line, which ps shows to every user;
    # removed so that the processes Data-Juicer starts do not inherit it
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        raise SystemExit(
            f"{TOKEN_ENV} is not set: the Data-Juicer service needs a token, which every "
            "request sends as 'Authorization: Bearer <token>' (clients: "
            "service.data_juicer.token); e.g. export "
            f"{TOKEN_ENV}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    try:
        require_data_juicer("the Data-Juicer service")
    except DataJuicerMissingError as exc:
        raise SystemExit(str(exc)) from None
    serve(args.host, args.port, token, args.allow_code_operators, args.exit_with_stdin)


if __name__ == "__main__":
    main()
