"""Resuming a run (``continue_from_checkpoint: true``) at its newest full checkpoint.

The trainer's newest full checkpoint ``global_step_N`` decides where a run resumes: the
trainer loads it (model, optimizer, LR schedule, RNG states), the explorer loads its
weights as policy version N and the taskset read position it had after explore step N
(``trinity.explorer.explorer_state``), and both loops continue with step N + 1. Mode
explore has no trainer checkpoint; it resumes after the last explore step it recorded,
with its initial weights.

A persistent experience buffer continues at the read position saved with the checkpoint
(``trinity.trainer.buffer_position``, ``BufferActor.resume``). Rollouts are sampled with
seeds derived from (seed, step) (:func:`trinity.explorer.explorer.rollout_seed`), so the
resumed steps roll out what the interrupted ones would have.
"""

from __future__ import annotations

from pathlib import Path

from trinity.config import Config, trainer_settings
from trinity.config.lookups import RESUME_FROM_PATH, checkpoint_step
from trinity.explorer.explorer_state import latest_explored
from trinity.trainer import checkpoint as ckpt


def resume_step(config: Config, job_dir: Path) -> int:
    """The step a run of ``config`` resumes after (0: from the start).

    ``trainer.trainer_config.trainer.resume_mode`` (veRL's names): ``auto`` resumes after
    the newest full checkpoint, ``disable`` starts from step 0 in the same job dir (its
    checkpoints are overwritten as the steps are saved again), ``resume_path`` resumes
    after the checkpoint ``resume_from_path`` names, a ``global_step_<N>`` of this job.
    """
    if not config.continue_from_checkpoint:
        return 0
    loop = trainer_settings(config.trainer).loop
    resume_mode = loop.resume_mode
    if resume_mode == "disable":
        return 0
    if config.mode == "explore":
        return latest_explored(job_dir)
    if Path(job_dir).is_dir():  # this run's trainer is the job's only writer, not started yet
        ckpt.restore_replaced(job_dir)
    if resume_mode == "resume_path":
        return checkpoint_step(RESUME_FROM_PATH, loop.resume_from_path, job_dir)
    return ckpt.read_latest(job_dir) or 0
