"""The Data-Juicer service: an HTTP server that runs Data-Juicer recipes on posted rows.

    python -m trinity.service.data_juicer.server --port 5005    # --port 0: any free port

    GET  /health   -> {"status": "ok", "data_juicer": "<version>"}
    POST /process  {"process": [{"text_length_filter": {"min_len": 10}}], "rows": [{...}]}
                   -> {"rows": [...]}  the rows the recipe kept, filters' statistics
                      under "__dj__stats__"; 400 for a recipe Data-Juicer cannot load,
                      500 with the reason for one that fails on the rows

It lets the data pipelines use a Data-Juicer installed in another environment or on
another machine (``service.data_juicer.server_url``); ``service.data_juicer.auto_start``
starts one per pipeline (``client.DataJuicerService``). A recipe's operators are loaded
once and kept for later requests with the same recipe (the 8 most recent); requests are
processed one at a time.

Once its socket listens it prints ``data-juicer-service-port: <port>`` on stdout, so a
caller that asked for port 0 learns the port without a race; ``--exit-with-stdin`` stops
the server when its standard input closes, i.e. when the process that started it is gone.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import threading
import time
from collections import OrderedDict
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from trinity.service.data_juicer.client import PORT_LINE
from trinity.service.data_juicer.runner import (
    DataJuicerMissingError,
    DataJuicerRunner,
    require_data_juicer,
)

RECIPES_KEPT = 8
SHUTDOWN_GRACE = 5  # seconds a request may still run once the server is asked to stop


class ProcessRequest(BaseModel):
    process: list[dict[str, Any]]
    rows: list[dict[str, Any]]


class ProcessResponse(BaseModel):
    rows: list[dict[str, Any]]


def create_app() -> FastAPI:
    app = FastAPI(title="trinity Data-Juicer service")
    runners: OrderedDict[str, DataJuicerRunner] = OrderedDict()
    lock = threading.Lock()  # one request at a time: operators and the cache are not shared-safe

    def runner_for(process: list[dict[str, Any]]) -> DataJuicerRunner:
        key = json.dumps(process, sort_keys=True)
        if key in runners:
            runners.move_to_end(key)
            return runners[key]
        try:
            runner = DataJuicerRunner(process)
        except DataJuicerMissingError:
            raise
        except Exception as exc:  # Data-Juicer raises KeyError, TypeError, ... for bad recipes
            raise HTTPException(
                400, f"cannot load the recipe: {type(exc).__name__}: {exc}"
            ) from exc
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
            except Exception as exc:  # the reason goes back to the pipeline that sent the rows
                raise HTTPException(500, f"the recipe failed: {type(exc).__name__}: {exc}") from exc

    return app


def serve(host: str, port: int, exit_with_stdin: bool = False) -> None:
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
            create_app(),
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
    args = parser.parse_args(argv)
    try:
        require_data_juicer("the Data-Juicer service")
    except DataJuicerMissingError as exc:
        raise SystemExit(str(exc)) from None
    serve(args.host, args.port, args.exit_with_stdin)


if __name__ == "__main__":
    main()
