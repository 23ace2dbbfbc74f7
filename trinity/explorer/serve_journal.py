"""Mode serve's journal: the scored experiences no ``/commit`` has written yet.

``/feedback`` appends the experiences it scored (one JSON line each, the ``file``
buffer's format, :mod:`trinity.buffer.jsonl`) and fsyncs them before it answers, so a
serve process killed after that answer, even with SIGKILL, loses none. ``/commit``
cuts the lines it wrote to the experience buffer off the front of the journal, and a
serve process started on the same job directory reads what is left (:meth:`replay`)
and commits it with the next ``/commit`` or at its stop.

    <job_dir>/serve/feedback_journal.jsonl

A crash between the buffer's write and the journal's cut writes those experiences
again after the restart: every scored experience reaches the buffer at least once.
"""

from __future__ import annotations

import os
from pathlib import Path

from trinity.buffer.jsonl import JsonlReader, JsonlWriter
from trinity.trainer.checkpoint import fsync_dir
from trinity.types import Experience

JOURNAL_NAME = "serve/feedback_journal.jsonl"


class FeedbackJournal:
    """An append-only file of scored experiences; callers serialise ``append`` and
    ``drop_first`` (the lines' order is the order of the store's scored list)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        # creates the directory and cuts a line a killed process left half written
        self._writer = JsonlWriter(self.path)

    def replay(self) -> list[Experience]:
        """Every experience the journal holds, oldest first."""
        reader = JsonlReader(self.path)
        out: list[Experience] = []
        while batch := reader.read_new(1024):
            out.extend(batch)
        return out

    def append(self, exps: list[Experience]) -> None:
        """Write ``exps`` at the end and fsync, so they outlive this process."""
        self._writer.write(exps)

    def drop_first(self, n: int) -> None:
        """Remove the first ``n`` experiences (those committed): the rest goes to a new
        file that replaces the journal in one rename, so a crash leaves one or the other."""
        if n <= 0:
            return
        data = self.path.read_bytes()
        cut = 0
        for _ in range(n):
            cut = data.index(b"\n", cut) + 1
        staged = self.path.with_name(self.path.name + ".tmp")
        with open(staged, "wb") as f:
            f.write(data[cut:])
            f.flush()
            os.fsync(f.fileno())
        self._writer.close()
        os.replace(staged, self.path)
        fsync_dir(self.path.parent)
        self._writer = JsonlWriter(self.path)

    def close(self) -> None:
        self._writer.close()
