"""Resuming a run (``continue_from_checkpoint: true``) at its newest full checkpoint.

The trainer's newest full checkpoint ``global_step_N`` decides where a run resumes: the
trainer loads it (model, optimizer, LR schedule, RNG states), the explorer loads its
weights as policy version N and the taskset read position it had after explore step N,
and both loops continue with step N + 1. Mode explore has no trainer checkpoint; it
resumes after the last explore step it recorded, with its initial weights.

The explorer runs ahead of the trainer, so ``explorer_meta.json`` keeps its state for
every step that a checkpoint may still name, keyed by step:

    {"latest_iteration": 5, "taskset": {...}, "model_version": 4,
     "by_step": {"4": {"taskset": {...}, "model_version": 3}, "5": {...}}}

Entries older than the newest full checkpoint are dropped on each write; each write
replaces the file atomically.

A persistent experience buffer (sql, file, a priority queue with a backup) outlives the
run, so the trainer's read position goes with each checkpoint: ``global_step_N/
buffer_position.json`` holds it as of the batch train step N trained on. It is written
(atomically) before the checkpoint's commit, which keeps it as it keeps the critic, and
the pointer moves last; a crash in between leaves the previous checkpoint and its
position in charge. On resume the buffer continues there (``BufferActor.resume``). Rollouts are sampled with seeds derived from (seed, step)
(:func:`trinity.explorer.explorer.rollout_seed`), so the resumed steps roll out what
the interrupted ones would have.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from trinity.config import Config
from trinity.config.lookups import RESUME_FROM_PATH, checkpoint_step
from trinity.trainer import checkpoint as ckpt

logger = logging.getLogger("trinity.launch")

EXPLORER_META = "explorer_meta.json"
BUFFER_POSITION = "buffer_position.json"


def resume_step(config: Config, job_dir: Path) -> int:
    """The step a run of ``config`` resumes after (0: from the start).

    ``trainer.trainer_config.trainer.resume_mode`` (veRL's names): ``auto`` resumes after
    the newest full checkpoint, ``disable`` starts from step 0 in the same job dir (its
    checkpoints are overwritten as the steps are saved again), ``resume_path`` resumes
    after the checkpoint ``resume_from_path`` names, a ``global_step_<N>`` of this job.
    """
    if not config.continue_from_checkpoint:
        return 0
    tc = config.trainer.trainer_config
    resume_mode = tc.trainer.resume_mode if tc is not None else "auto"
    if resume_mode == "disable":
        return 0
    if config.mode == "explore":
        meta = ckpt.read_json(Path(job_dir) / EXPLORER_META) or {}
        return int(meta.get("latest_iteration", 0))
    if Path(job_dir).is_dir():  # this run's trainer is the job's only writer, not started yet
        ckpt.restore_replaced(job_dir)
    if resume_mode == "resume_path":
        assert tc is not None
        return checkpoint_step(RESUME_FROM_PATH, tc.trainer.resume_from_path, job_dir)
    return ckpt.read_latest(job_dir) or 0


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


def derived_explorer_state(config: Config, step: int) -> dict[str, Any]:
    """The taskset position after ``step`` full batches, for runs that recorded none."""
    logger.warning(
        "no explorer state recorded for step %d: resuming the tasksets at position %d "
        "(step x batch_size)",
        step,
        step * config.buffer.batch_size,
    )
    return {"taskset": {"position": step * config.buffer.batch_size}}


def save_buffer_position(job_dir: Path, step: int, position: dict[str, Any]) -> None:
    """Record the experience buffer's read ``position`` for checkpoint ``step``; call it
    before the checkpoint is saved (see the module doc)."""
    ckpt.write_json_atomic(ckpt.step_dir(Path(job_dir), step) / BUFFER_POSITION, position)


def buffer_position_at(job_dir: Path, step: int) -> dict[str, Any] | None:
    """The read position saved with checkpoint ``step``, if one was."""
    return ckpt.read_json(ckpt.step_dir(Path(job_dir), step) / BUFFER_POSITION)
