"""The experience buffer's read position saved with each full checkpoint.

A persistent experience buffer (sql, file, a priority queue with a backup) outlives the
run, so the trainer's read position goes with each checkpoint: ``global_step_N/
buffer_position.json`` holds it as of the batch train step N trained on. It is written
(atomically) before the checkpoint's commit, which keeps it as it keeps the critic, and
the pointer moves last; a crash in between leaves the previous checkpoint and its
position in charge. On resume the buffer continues there (``BufferActor.resume``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity.trainer import checkpoint as ckpt

BUFFER_POSITION = "buffer_position.json"


def save_buffer_position(job_dir: Path, step: int, position: dict[str, Any]) -> None:
    """Record the experience buffer's read ``position`` for checkpoint ``step``; call it
    before the checkpoint is saved (see the module doc)."""
    ckpt.write_json_atomic(ckpt.step_dir(Path(job_dir), step) / BUFFER_POSITION, position)


def buffer_position_at(job_dir: Path, step: int) -> dict[str, Any] | None:
    """The read position saved with checkpoint ``step``, if one was."""
    return ckpt.read_json(ckpt.step_dir(Path(job_dir), step) / BUFFER_POSITION)
