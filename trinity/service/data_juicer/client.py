"""Reach the Data-Juicer service a config names, starting it first when asked to.

    service = DataJuicerService(config.service.data_juicer)
    rows = service.client().process(recipe, rows)   # starts or connects on first use
    service.close()                                 # stops what it started

``service.data_juicer.auto_start: true`` starts ``python -m
trinity.service.data_juicer.server`` as a child process on ``127.0.0.1:<port>`` (``port:
0`` lets it pick a free one and report it); it needs the ``data_juicer`` extra here, and
stops with ``close()`` or when this process exits. Its token is made here, fresh for each
start, and handed over in the child's environment (``TRINITY_DATA_JUICER_TOKEN``), not
on its command line, which ``ps`` shows to every user; ``allow_code_operators`` becomes
its ``--allow-code-operators``. Otherwise ``server_url`` names a running service, which
may live in another environment: this side needs no Data-Juicer, and sends
``service.data_juicer.token``, or where that is empty ``$TRINITY_DATA_JUICER_TOKEN``.
Every failure to reach or start the service is a one-line ``DataJuicerServiceError``
naming the key and its value.
"""

from __future__ import annotations

import collections
import os
import secrets
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import httpx

from trinity.service.data_juicer.runner import require_data_juicer

if TYPE_CHECKING:
    from trinity.config.schema import DataJuicerServiceConfig

START_TIMEOUT = 180.0  # importing Data-Juicer alone takes seconds on a busy machine
REQUEST_TIMEOUT = 600.0  # a large batch through model-based operators takes minutes
PORT_LINE = "data-juicer-service-port:"  # what server.py prints once it listens
TOKEN_ENV = "TRINITY_DATA_JUICER_TOKEN"  # where server.py reads its token


class DataJuicerServiceError(RuntimeError):
    """The Data-Juicer service cannot be reached, did not start, or failed a request."""


class DataJuicerClient:
    """HTTP client of one Data-Juicer service (``server.py``)."""

    def __init__(self, url: str, token: str, *, trust_env: bool = True) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(REQUEST_TIMEOUT, connect=10.0),
            trust_env=trust_env,  # a local service must not go through a proxy
        )

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def process(self, process: list[Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows Data-Juicer's recipe ``process`` keeps, with their ``__dj__stats__``."""
        return self._call("POST", "/process", json={"process": process, "rows": rows})["rows"]

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise DataJuicerServiceError(
                f"no answer from the Data-Juicer service at {self.url}{path}: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if response.status_code != 200:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise DataJuicerServiceError(
                f"the Data-Juicer service at {self.url}{path} answered "
                f"{response.status_code}: {detail}"
            )
        return response.json()

    def close(self) -> None:
        self._http.close()


class DataJuicerService:
    """The service ``service.data_juicer`` describes; started or reached on first use."""

    def __init__(self, cfg: DataJuicerServiceConfig) -> None:
        self.cfg = cfg
        self._client: DataJuicerClient | None = None
        self._server: _LocalServer | None = None

    def client(self) -> DataJuicerClient:
        if self._client is not None:
            return self._client
        if self.cfg.auto_start:
            self._server = _LocalServer(self.cfg.port, self.cfg.allow_code_operators)
            client = DataJuicerClient(self._server.url, self._server.token, trust_env=False)
            where = f"service.data_juicer.auto_start=true (port {self._server.port})"
        else:
            if not self.cfg.server_url:
                raise DataJuicerServiceError(
                    "service.data_juicer: set server_url (a running Data-Juicer service) "
                    "or auto_start: true"
                )
            where = f"service.data_juicer.server_url={self.cfg.server_url!r}"
            token = self.cfg.token or os.environ.get(TOKEN_ENV, "")
            if not token:
                raise DataJuicerServiceError(
                    f"service.data_juicer.token: empty and {TOKEN_ENV} is not set here; the "
                    f"service at server_url={self.cfg.server_url!r} answers only requests "
                    f"with the token it was started with (its {TOKEN_ENV})"
                )
            client = DataJuicerClient(self.cfg.server_url, token)
        try:
            client.health()
        except DataJuicerServiceError as exc:
            client.close()
            self.close()
            hint = ""
            if "answered 401" in str(exc):
                hint = (
                    f"; set service.data_juicer.token (or {TOKEN_ENV}) to the token "
                    "the service was started with"
                )
            raise DataJuicerServiceError(f"{where}: {exc}{hint}") from None
        self._client = client
        return client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._server is not None:
            self._server.stop()
            self._server = None


class _LocalServer:
    """``server.py`` in a child process; its output is copied to this process's stderr."""

    def __init__(
        self, port: int, allow_code_operators: bool = False, timeout: float = START_TIMEOUT
    ) -> None:
        require_data_juicer(f"service.data_juicer.auto_start=true (port {port})")
        self.port = port
        self.token = secrets.token_urlsafe(32)
        self._bound = threading.Event()
        self._last_lines: collections.deque[str] = collections.deque(maxlen=20)
        flags = ["--allow-code-operators"] if allow_code_operators else []
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "trinity.service.data_juicer.server"]
            + ["--port", str(port), "--exit-with-stdin", *flags],
            stdin=subprocess.PIPE,  # closed by stop() or by this process's exit
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **os.environ,
                TOKEN_ENV: self.token,
                # one progress bar per operator and request would flood this process's log
                "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
            },
        )
        reader = threading.Thread(target=self._copy_output, name="data-juicer-log", daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout
        while not self._bound.wait(0.1):
            exited = self._proc.poll() is not None
            if exited or time.monotonic() > deadline:
                self.stop()
                reader.join(timeout=5)  # its last lines say why
                why = self._last_lines[-1] if self._last_lines else "no output"
                when = f"exit code {self._proc.returncode}" if exited else f"{timeout:.0f} s"
                hint = "; choose another port, or 0 for any free one" if "bind" in why else ""
                raise DataJuicerServiceError(
                    f"service.data_juicer.port={port}: the Data-Juicer service did not start "
                    f"({when}: {why}){hint}"
                )
        self.url = f"http://127.0.0.1:{self.port}"

    def _copy_output(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if not self._bound.is_set() and line.startswith(PORT_LINE):
                self.port = int(line.split()[-1])
                self._bound.set()
                continue
            if line.strip():
                sys.stderr.write(f"[data-juicer service] {line}")
                self._last_lines.append(line.strip())

    def stop(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()  # the server's stdin watch shuts it down
            try:
                self._proc.wait(timeout=15)  # the server gives a running request 5 s
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
