"""The explorer's state after each explore step, kept in ``explorer_meta.json`` for resume.

The explorer runs ahead of the trainer, so the file keeps its state for every step that
a checkpoint may still name, keyed by step:

    {"latest_iteration": 5, "taskset": {...}, "model_version": 4,
     "by_step": {"4": {"taskset": {...}, "model_version": 3}, "5": {...}}}

Entries older than the newest full checkpoint are dropped on each write; each write
replaces the file atomically. How a run resumes: ``trinity.launch.resume``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from trinity.config import BufferConfig
from trinity.trainer import checkpoint as ckpt

logger = logging.getLogger("trinity.launch")

EXPLORER_META = "explorer_meta.json"


def save_explorer_state(job_dir: Path, step: int, state: dict[str, Any]) -> None:
    """Record the explorer's ``state`` after explore ``step`` in ``explorer_meta.json``."""
    path = Path(job_dir) / EXPLORER_META
    meta = ckpt.read_json(path) or {}
    oldest = ckpt.read_latest(job_dir) or 0
    by_step = {k: v for k, v in (meta.get("by_step") or {}).items() if oldest <= int(k) < step}
    by_step[str(step)] = state
    ckpt.write_json_atomic(path, {"latest_iteration": step, **state, "by_step": by_step})


def explorer_state_at(job_dir: Path, step: int) -> dict[str, Any] | None:
    """The explorer's state after explore ``step``, if it was recorded."""
    meta = ckpt.read_json(Path(job_dir) / EXPLORER_META) or {}
    state = (meta.get("by_step") or {}).get(str(step))
    if state is None and meta.get("latest_iteration") == step and "taskset" in meta:
        state = {k: v for k, v in meta.items() if k not in ("latest_iteration", "by_step")}
    return state


def latest_explored(job_dir: Path) -> int:
    """The last explore step recorded in ``job_dir`` (0: none)."""
    meta = ckpt.read_json(Path(job_dir) / EXPLORER_META) or {}
    return int(meta.get("latest_iteration", 0))


def derived_explorer_state(buffer: BufferConfig, step: int) -> dict[str, Any]:
    """The taskset position after ``step`` full batches, for runs that recorded none."""
    logger.warning(
        "no explorer state recorded for step %d: resuming the tasksets at position %d "
        "(step x batch_size)",
        step,
        step * buffer.batch_size,
    )
    return {"taskset": {"position": step * buffer.batch_size}}
