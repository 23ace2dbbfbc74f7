"""Rows a resumed run's trainer skips: those stored for the explore steps it runs again.

A run resumes after the checkpoint of step N: its explorer rolls out steps N + 1, ...
again (with the same seeds) and stores them anew, so the rows the interrupted run
already stored for those steps, past the checkpoint's read position, would be read
twice. ``Superseded(end, step)`` names them: stored before ``end`` (a row id or byte
offset, exclusive) and from an explore step (``EID.batch``) after ``step``; with
``step`` None every row before ``end`` (a resume without a saved read position).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Superseded:
    end: int
    step: int | None

    def skips(self, where: int, batch: object) -> bool:
        """Whether the row at ``where`` (row id or byte offset) of explore step ``batch``
        is one of them; eval batches (``"eval_3"``) are never in the buffer's steps."""
        if where >= self.end:
            return False
        return self.step is None or (isinstance(batch, int) and batch > self.step)
