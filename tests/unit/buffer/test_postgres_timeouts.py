"""PostgreSQL's connect and lock timeouts (``connect_timeout``, ``lock_timeout``).

The connect timeout is tested against a socket on 127.0.0.1 that listens and never
answers (the kernel completes the handshake; no server ever speaks); the lock timeout
against the session's real server, with a second connection holding the table's lock.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from buffer_testing import full_experience
from sqlalchemy import create_engine, text

from trinity.buffer import SQLExperienceStorage, make_experience_buffer
from trinity.buffer.errors import StorageTimeout
from trinity.config.schema.buffer import ExperienceBufferConfig, StorageConfig


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def within(seconds: float, call: Callable[[], Any]) -> BaseException | None:
    """What ``call`` raised (None if it returned); fails if it is still running after
    ``seconds`` (it then ends once the test's sockets and locks are released)."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still waiting after {seconds} s: no timeout fired")
    return outcome[0]


def test_connect_timeout_fires_against_a_server_that_never_answers(silent_port: int) -> None:
    url = f"postgresql+psycopg://trinity@127.0.0.1:{silent_port}/trinity"
    cfg = ExperienceBufferConfig(name="exp", storage_type="sql", path=url, connect_timeout=2)
    began = time.monotonic()
    error = within(15, lambda: make_experience_buffer(cfg))
    elapsed = time.monotonic() - began
    assert isinstance(error, StorageTimeout), repr(error)
    message = str(error)
    assert "\n" not in message
    assert "connect_timeout" in message and "2" in message
    assert f"127.0.0.1:{silent_port}" in message
    assert 1.5 <= elapsed < 10, elapsed


def test_connect_timeout_default_is_ten_seconds() -> None:
    assert StorageConfig().connect_timeout == 10
    assert StorageConfig().lock_timeout > 0


def test_lock_timeout_fires_while_another_connection_holds_the_table(postgres_url: str) -> None:
    storage = SQLExperienceStorage(postgres_url, lock_timeout=1)
    holder = create_engine(postgres_url)
    try:
        with holder.connect() as conn, conn.begin():
            conn.execute(text("LOCK TABLE experience IN ACCESS EXCLUSIVE MODE"))
            began = time.monotonic()
            error = within(15, lambda: storage.write([full_experience(0)]))
            elapsed = time.monotonic() - began
        assert isinstance(error, StorageTimeout), repr(error)
        message = str(error)
        assert "\n" not in message
        assert "lock_timeout=1 s" in message and "LOCK TABLE experience" in message
        assert 0.8 <= elapsed < 10, elapsed
        # the lock released, the same storage writes
        storage.write([full_experience(1)])
        assert storage.count() == 1
    finally:
        holder.dispose()
        storage.close()


def test_timeouts_must_be_positive(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"connect_timeout must be > 0 seconds, got 0"):
        SQLExperienceStorage(str(tmp_path / "a.db"), connect_timeout=0)
    with pytest.raises(ValueError, match=r"lock_timeout must be > 0 seconds, got -1"):
        SQLExperienceStorage(str(tmp_path / "a.db"), lock_timeout=-1)
