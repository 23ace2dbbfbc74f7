"""Experience buffers backed by persistent storage (``storage_type: sql`` and ``file``).

Writers append through the storage; the reader polls for rows written since its last
read, so writers and the reader may live in different processes (several explorer
runners and the trainer) and a restarted reader resumes from ``state_dict``.
``get(n, timeout)`` has the queue's contract: ``n`` experiences, or what arrived before
the timeout (the incomplete batch of ``max_read_timeout``).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Protocol

from trinity.buffer.errors import InvalidRows, QueueClosed
from trinity.buffer.jsonl import JsonlReader, JsonlWriter
from trinity.config.schema.buffer import CONNECT_TIMEOUT, LOCK_TIMEOUT
from trinity.types import Experience

# the reader polls quickly at first, then backs off to this interval while idle
MAX_POLL_INTERVAL = 0.5


class NewRowReader(Protocol):
    def read_new(self, n: int) -> list[Experience]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def discard_stored(self, after_step: int | None) -> None: ...


class StorageBuffer:
    """``put``/``get``/``close`` over a storage that appends and reads new rows."""

    def __init__(
        self,
        writer: Any,
        reader: NewRowReader,
        read_timeout: float | None = None,
        poll_interval: float = 0.01,
    ) -> None:
        self.writer = writer
        self.reader = reader
        self.read_timeout = read_timeout
        self.poll_interval = poll_interval
        self._closed = threading.Event()
        self._read_lock = threading.Lock()

    def put(self, exps: list[Experience]) -> None:
        if self._closed.is_set():
            raise QueueClosed("cannot put into a closed experience buffer")
        self.writer.write(list(exps))

    def get(self, n: int, timeout: float | None = None) -> list[Experience]:
        """Up to ``n`` new experiences, in the order they were stored.

        Waits until ``n`` are there or ``timeout`` (default: ``read_timeout``; ``None``
        waits forever) passes. After ``close`` it returns what is left, then raises
        QueueClosed.
        """
        if n < 1:
            raise ValueError(f"get needs n >= 1, got {n}")
        timeout = self.read_timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = self.poll_interval
        out: list[Experience] = []
        with self._read_lock:
            while True:
                out += self.reader.read_new(n - len(out))
                if len(out) >= n or self._closed.is_set():
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                # Event.wait: close() ends the wait at once
                self._closed.wait(interval if remaining is None else min(interval, remaining))
                interval = min(interval * 2, MAX_POLL_INTERVAL)
        if not out and self._closed.is_set():
            raise QueueClosed("the experience buffer is closed and has nothing new")
        return out

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def invalid(self) -> InvalidRows | None:
        """Rows skipped as malformed (``skip_invalid_rows``), when the storage counts them."""
        return getattr(self.reader, "invalid", None)

    def state_dict(self) -> dict[str, Any]:
        """The read position: after the last experiences ``get`` returned."""
        with self._read_lock:
            return self.reader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._read_lock:
            self.reader.load_state_dict(state)

    def discard_stored(self, after_step: int | None) -> None:
        """Skip the experiences stored now past the read position from explore steps
        after ``after_step`` (None: all of them): a resumed explorer stores them again."""
        with self._read_lock:
            self.reader.discard_stored(after_step)

    def close(self) -> None:
        """Stop puts and wake a waiting reader; closes the storage once no read runs."""
        self._closed.set()
        with self._read_lock:
            self.writer.close()
            if self.reader is not self.writer and hasattr(self.reader, "close"):
                self.reader.close()


def sql_buffer(
    url_or_path: str,
    read_timeout: float | None = None,
    table_name: str = "experience",
    skip_invalid: bool = False,
    connect_timeout: float = CONNECT_TIMEOUT,
    lock_timeout: float = LOCK_TIMEOUT,
) -> StorageBuffer:
    """A buffer over one SQL table; the same storage writes and reads (the timeouts:
    PostgreSQL's, in seconds, see ``trinity.buffer.sql_storage``)."""
    from trinity.buffer.sql_storage import SQLExperienceStorage  # sqlalchemy only for SQL buffers

    storage = SQLExperienceStorage(
        url_or_path,
        table_name=table_name,
        skip_invalid=skip_invalid,
        connect_timeout=connect_timeout,
        lock_timeout=lock_timeout,
    )
    return StorageBuffer(storage, storage, read_timeout)


def jsonl_buffer(
    path: str, read_timeout: float | None = None, skip_invalid: bool = False
) -> StorageBuffer:
    """A buffer over one JSON-lines file (``path`` may name a directory: ``experiences.jsonl`` in it)."""
    return StorageBuffer(
        JsonlWriter(jsonl_path(path)), JsonlReader(jsonl_path(path), skip_invalid), read_timeout
    )


def jsonl_path(path: str) -> str:
    """``path`` if it names a ``.jsonl``/``.json`` file, else ``<path>/experiences.jsonl``."""
    path = os.path.expanduser(path)
    if os.path.splitext(path)[1].lower() in (".jsonl", ".json"):
        return path
    return os.path.join(path, "experiences.jsonl")
