"""The run's experience buffer as a Ray actor, which the explorer writes and the trainer
reads through its handle.

``trinity.buffer.make_experience_buffer`` builds the storage (queue, priority queue, sql
or file); this class only adapts it to remote calls: a closed and drained queue answers
``get`` with an empty list instead of an exception, which is how the trainer learns that
the explorer is done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # trinity.types imports torch, which the driver never does
    from trinity.types import Experience


class BufferActor:
    """The experience buffer ``storage`` (a ``StorageConfig``) describes, as a threaded actor."""

    def __init__(self, storage: Any) -> None:
        from trinity.buffer import make_experience_buffer

        self.queue = make_experience_buffer(storage)

    def put(self, experiences: list[Experience]) -> None:
        self.queue.put(experiences)

    def get(self, n: int, timeout: float | None) -> list[Experience]:
        """Up to ``n`` experiences; an empty list once the queue is closed and drained."""
        from trinity.buffer.errors import QueueClosed

        try:
            return self.queue.get(n, timeout)
        except QueueClosed:
            return []

    def close(self) -> None:
        self.queue.close()
