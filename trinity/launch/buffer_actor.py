"""The run's experience buffer as a Ray actor, which the explorer writes and the trainer
reads through its handle.

``trinity.buffer.make_experience_buffer`` builds the storage (queue, priority queue, sql
or file); this class only adapts it to remote calls: a closed and drained queue answers
``get`` with an empty list instead of an exception, which is how the trainer learns that
the explorer is done. The trainer reads with ``read``, which also returns the buffer's
read position after the batch; the position it trained on is saved with each checkpoint
and ``resume`` brings it back (``trinity.trainer.buffer_position``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # trinity.types imports torch, which the driver never does
    from trinity.types import Experience

logger = logging.getLogger("trinity.buffer")


class BufferActor:
    """The experience buffer ``storage`` (a ``StorageConfig``) describes, as a threaded actor."""

    def __init__(self, storage: Any) -> None:
        from trinity.buffer import make_experience_buffer

        self.storage = storage
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

    def read(self, n: int, timeout: float | None) -> tuple[list[Experience], dict[str, Any] | None]:
        """``get``, and the read position right after it (None: the buffer keeps none, as
        the in-memory FIFO queue). The trainer is the only reader, so no read comes between."""
        batch = self.get(n, timeout)
        return batch, self.position()

    def size(self) -> int | None:
        """Experiences waiting to be read; None where the storage cannot tell (sql, file)."""
        qsize = getattr(self.queue, "qsize", None)
        return qsize() if qsize is not None else None

    def position(self) -> dict[str, Any] | None:
        """The read position with the storage it belongs to; None where there is none."""
        state = self.queue.state_dict() if hasattr(self.queue, "state_dict") else None
        if state is None:
            return None
        return {**self._identity(), "position": state}

    def resume(self, job_dir: str, step: int, explorer_resumes: bool) -> None:
        """Continue at the read position checkpoint ``step`` saved; with
        ``explorer_resumes`` (mode both) skip what the interrupted run's explorer stored
        for steps after ``step``, which the resumed explorer stores again."""
        from trinity.trainer.buffer_position import buffer_position_at

        if not hasattr(self.queue, "load_state_dict"):
            return  # the FIFO queue starts empty, as the explorer restarts after ``step``
        saved = buffer_position_at(Path(job_dir), step)
        if saved is not None and {k: saved.get(k) for k in self._identity()} == self._identity():
            self.queue.load_state_dict(saved["position"])
            logger.info("experience buffer: resumed at %s (checkpoint %d)", saved["position"], step)
        else:
            what = "no read position" if saved is None else f"the read position of {saved}"
            logger.warning(
                "experience buffer %s: checkpoint %d holds %s; %s",
                self._identity(),
                step,
                what,
                "skipping what the interrupted run stored"
                if explorer_resumes
                else "reading from its first row",
            )
            saved = None
        if explorer_resumes:
            self.queue.discard_stored(step if saved is not None else None)

    def close(self) -> None:
        self.queue.close()

    def _identity(self) -> dict[str, Any]:
        return {
            "storage_type": getattr(self.storage, "storage_type", None) or "queue",
            "path": getattr(self.storage, "path", None),
        }
