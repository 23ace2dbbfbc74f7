"""``trinity studio`` as a real server for the Studio's tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def studio_server(log: Path, timeout: float = 90) -> Iterator[int]:
    """``trinity studio`` on a free port of 127.0.0.1 until the block ends; yields the port.
    Fails the test, with the end of its output (``log``), if it does not answer in time."""
    with socket.socket() as sock:  # streamlit does not report the port of --server.port 0
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "trinity.cli.studio", "--port", str(port)],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped as a whole below
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                url = f"http://127.0.0.1:{port}/_stcore/health"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Studio did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield port
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
