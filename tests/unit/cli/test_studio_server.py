"""``trinity studio`` serves on 127.0.0.1 with Streamlit's own checks on: its app
websocket answers only a Host naming the loopback (DNS rebinding) and only its own
origin (CORS), and uploads need the XSRF token."""

from __future__ import annotations

import base64
import importlib.util
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from studio_testing import studio_server

from trinity.cli.studio import streamlit_knows, studio_command

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("streamlit") is None, reason="the studio extra is not installed"
)


def _option(command: list[str], name: str) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == name]


def test_the_command_binds_the_loopback_with_the_checks_on() -> None:
    command = studio_command()
    assert _option(command, "--server.address") == ["127.0.0.1"]
    assert _option(command, "--server.enableCORS") == ["true"]
    assert _option(command, "--server.enableXsrfProtection") == ["true"]
    if streamlit_knows("server.allowedHosts"):
        assert sorted(_option(command, "--server.allowedHosts")) == [
            "127.0.0.1",
            "::1",
            "localhost",
        ]
    else:  # an older Streamlit refuses an unknown flag: the command leaves it out
        assert _option(command, "--server.allowedHosts") == []
    # bound to every interface on purpose: any name may reach it
    assert _option(studio_command("0.0.0.0"), "--server.allowedHosts") == []


@pytest.fixture(scope="module")
def studio_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with studio_server(tmp_path_factory.mktemp("studio") / "studio.log") as port:
        yield port


def _websocket_status(port: int, host: str, origin: str | None = None) -> int:
    """The status line's code of a websocket handshake on the app's stream (101: open)."""
    request = (
        f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
        + (f"Origin: {origin}\r\n" if origin else "")
        + "\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request.encode())
        return int(sock.recv(100).split(b" ")[1])


@pytest.mark.slow
def test_the_app_answers_only_the_loopback_and_its_own_origin(studio_port: int) -> None:
    port = studio_port
    assert _websocket_status(port, f"127.0.0.1:{port}", f"http://127.0.0.1:{port}") == 101
    assert _websocket_status(port, f"localhost:{port}", f"http://localhost:{port}") == 101
    assert _websocket_status(port, f"127.0.0.1:{port}", "http://evil.example") == 403
    if streamlit_knows("server.allowedHosts"):  # Streamlit 1.61 and later
        assert _websocket_status(port, f"evil.example:{port}", f"http://evil.example:{port}") == 403
