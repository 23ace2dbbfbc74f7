"""The experience queue between explorer and trainer (``storage_type: queue``).

A bounded FIFO of experiences, safe to share between threads. It is a plain class so
tests build it directly; the launcher hosts it in a Ray actor (give the actor
``max_concurrency > 1`` so a blocked ``get`` does not stop ``put`` from running).

- ``put`` blocks while the queue is full, and first appends the batch to the backup
  (a SQLite database or a JSON-lines file) so the backup holds everything the trainer
  could ever have seen.
- ``get(n, timeout)`` returns ``n`` experiences, or fewer when the timeout elapses
  (the "incomplete batch" of ``max_read_timeout``).
- ``close`` wakes every waiter: readers drain what is left, then get ``QueueClosed``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import Protocol

from trinity.buffer.errors import QueueClosed
from trinity.buffer.jsonl import JsonlWriter
from trinity.config.schema.buffer import CONNECT_TIMEOUT, LOCK_TIMEOUT
from trinity.types import Experience


class ExperienceWriter(Protocol):
    def write(self, exps: list[Experience]) -> list[int]:
        """Store ``exps``; returns where each one went (row id or byte offset)."""
        ...

    def close(self) -> None: ...


def open_backup(
    path: str, connect_timeout: float = CONNECT_TIMEOUT, lock_timeout: float = LOCK_TIMEOUT
) -> ExperienceWriter:
    """A JSON-lines writer for ``*.jsonl``/``*.json`` paths, else a SQL storage (URL or
    file, with PostgreSQL's timeouts)."""
    if "://" not in path and os.path.splitext(path)[1].lower() in (".jsonl", ".json"):
        return JsonlWriter(path)
    from trinity.buffer.sql_storage import SQLExperienceStorage  # sqlalchemy only for SQL backups

    return SQLExperienceStorage(path, connect_timeout=connect_timeout, lock_timeout=lock_timeout)


class ExperienceQueue:
    """Bounded, thread-safe FIFO of experiences with an optional backup."""

    def __init__(
        self,
        capacity: int = 10000,
        backup: ExperienceWriter | None = None,
        read_timeout: float | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"queue capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.backup = backup
        self.read_timeout = read_timeout  # used by get() when it is given no timeout
        self._items: deque[Experience] = deque()
        self._closed = False
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        # serializes backup writes with enqueueing so the backup keeps queue order
        self._put_lock = threading.Lock()

    def put(self, exps: list[Experience]) -> None:
        """Append ``exps``; blocks until there is room. Raises QueueClosed after ``close``.

        A batch no larger than ``capacity`` enters the queue in one piece; a larger one
        enters in capacity-sized pieces as readers make room.
        """
        exps = list(exps)
        if not exps:
            return
        with self._put_lock:
            self._check_open()
            if self.backup is not None:
                self.backup.write(exps)
            start = 0
            with self._lock:
                while start < len(exps):
                    chunk = min(len(exps) - start, self.capacity)
                    while not self._closed and self.capacity - len(self._items) < chunk:
                        self._not_full.wait()
                    self._check_open()
                    self._items.extend(exps[start : start + chunk])
                    start += chunk
                    self._not_empty.notify_all()

    def get(self, n: int, timeout: float | None = None) -> list[Experience]:
        """Up to ``n`` experiences, oldest first.

        Waits until ``n`` are available (or the queue is full), ``timeout`` seconds
        (default: ``read_timeout``; ``None`` waits forever) pass (then returns what there
        is, possibly ``[]``), or the queue is closed (then returns what is left; raises
        QueueClosed once nothing is left).
        """
        if n < 1:
            raise ValueError(f"get needs n >= 1, got {n}")
        timeout = self.read_timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        # a full queue cannot grow, so waiting for more than capacity would never end
        wanted = min(n, self.capacity)
        with self._lock:
            while len(self._items) < wanted and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._not_empty.wait(remaining)
            if self._closed and not self._items:
                raise QueueClosed("the experience queue is closed and empty")
            out = [self._items.popleft() for _ in range(min(n, len(self._items)))]
            if out:
                self._not_full.notify_all()
            return out

    def qsize(self) -> int:
        with self._lock:
            return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop accepting puts, wake all waiters, and close the backup."""
        with self._lock:
            self._closed = True
            self._not_empty.notify_all()
            self._not_full.notify_all()
        with self._put_lock:  # a put in flight finishes its backup write first
            if self.backup is not None:
                self.backup.close()

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosed("cannot put into a closed experience queue")
