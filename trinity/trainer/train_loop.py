"""The trainer's loop in a run: read a batch -> train -> publish weights -> [save].

:func:`train` is one step's body (``trinity.loop`` runs it in one process);
:class:`TrainLoop` adds what a run needs around it: resume, monitors, the weight
publishing schedule, checkpoints with the buffer's read position, and the final export.
What crosses processes on Ray (reading the experience buffer, reporting each step,
publishing weights) is handed in: ``trinity.launch.roles.TrainerRole`` wires it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trinity.config import Config, trainer_settings
from trinity.trainer import checkpoint as ckpt
from trinity.trainer.buffer_position import save_buffer_position
from trinity.utils.log import metrics_brief

if TYPE_CHECKING:  # torch loads with the trainer, not with this module
    from trinity.monitor.base import Monitor
    from trinity.trainer.train_input import TrainInput
    from trinity.trainer.trainer import Trainer
    from trinity.types import Experience
    from trinity.utils.memory import TrainerHeap

# reads ``n`` experiences from the buffer: (them, the buffer's read position after them)
BufferRead = Callable[[int], "tuple[list[Experience], dict[str, Any] | None]"]


def staleness(step: int, version: int) -> int:
    """Train steps the policy of version ``version`` lags behind step ``step``'s schedule."""
    return step - 1 - version


def train(
    trainer: Trainer, train_input: TrainInput, step: int
) -> tuple[list[Experience], dict[str, float]] | None:
    """Train step ``step``: sample a batch from the trainer's input and update the model;
    (the batch, its metrics with the batch's staleness), or None when the input ended."""
    experiences = train_input.next_batch(model_version=trainer.global_step)
    if not experiences:
        return None
    trainer.logger.info("train step %d begins with %d experiences", step, len(experiences))
    metrics = trainer.train_step(experiences)
    lags = [staleness(step, e.model_version) for e in experiences]
    metrics["trainer/staleness/mean"] = sum(lags) / len(lags)
    metrics["trainer/staleness/max"] = float(max(lags))
    return experiences, metrics


class Progress(Protocol):
    """Where a loop reports its steps (on Ray: the run's ``Synchronizer`` actor)."""

    def report(self, role: str, step: int, metrics: dict[str, float]) -> None: ...

    def finish(self, role: str) -> None: ...


class Publisher(Protocol):
    """The trainer's end of weight synchronisation (``trinity.sync.publisher``)."""

    def start(self) -> None:
        """The trainer runs: explorers of the job in other processes wait for it."""

    def after_step(self, step: int, total_steps: int) -> None:
        """Publish the policy of ``step`` when the sync schedule asks for it."""

    def stop(self) -> None:
        """The trainer has finished: no explorer waits for it any more."""

    def close(self) -> None:
        """Release what publishing holds (a shared-memory slot)."""


class TrainLoop:
    """Train steps ``start_step + 1 .. total_steps`` of one run on ``trainer``.

    ``read``: the experience buffer (None: sft and dpo read their dataset,
    ``trinity.trainer.train_input``); ``heap``: what the process does with the memory a
    step frees; ``progress``: each step's metrics, and the end.
    """

    def __init__(
        self,
        config: Config,
        job_dir: Path,
        trainer: Trainer,
        read: BufferRead | None,
        heap: TrainerHeap,
        monitor: Monitor,
        progress: Progress,
        publisher: Publisher,
        logger: logging.Logger,
    ) -> None:
        from trinity.trainer.train_input import TrainInput

        self.config = config
        self.job_dir = Path(job_dir)
        self.trainer = trainer
        self.heap = heap
        self.monitor = monitor
        self.progress = progress
        self.publisher = publisher
        self.logger = logger
        self._read = read
        self.input = TrainInput(
            config, trainer.tokenizer, self._read_buffer if read is not None else None
        )
        # the buffer's read position after the last batch read, and after the last one
        # a finished step trained on (the one its checkpoint keeps)
        self._read_position: dict[str, Any] | None = None
        self._trained_position: dict[str, Any] | None = None

    def _read_buffer(self, n: int) -> list[Experience]:
        assert self._read is not None
        experiences, self._read_position = self._read(n)
        return experiences

    def run(self, total_steps: int, start_step: int = 0, export_hf: bool = False) -> dict[str, Any]:
        """Train ``total_steps`` steps; ``export_hf`` also writes the final policy as a
        Hugging Face directory (``final_model_dir``), where the next stage starts."""
        cfg = self.config
        keep = trainer_settings(cfg.trainer).loop.max_actor_ckpt_to_keep
        completed = start_step
        final_model_dir = None
        if start_step > 0:
            self._resume(start_step)
        self.publisher.start()
        try:
            for step in range(start_step + 1, total_steps + 1):
                trained = train(self.trainer, self.input, step)
                if trained is None:
                    self.logger.info("the trainer's input ended before step %d", step)
                    break
                _, metrics = trained
                # nothing of the step is alive now: unless kept, its freed tensors go back
                # to the OS before the weights are published (the explorer grows while it
                # loads them); the next step faults its pages in again (utils/memory.py)
                self.heap.after_step()
                self.monitor.log(metrics, step)
                self.progress.report("trainer", step, metrics)
                self.logger.info("train step %d ends: %s", step, metrics_brief(metrics))
                completed = step
                self._trained_position = self._read_position
                self.publisher.after_step(step, total_steps)
                if cfg.trainer.save_interval > 0 and step % cfg.trainer.save_interval == 0:
                    self._save_checkpoint(step, keep)
        finally:
            # the final weights are always kept; a failed step is never saved
            if completed > start_step and ckpt.read_latest(self.job_dir) != completed:
                self._save_checkpoint(completed, keep)
            self.publisher.stop()
            self.progress.finish("trainer")
            self.monitor.close()
            self.publisher.close()  # the driver removes a slot's file once the explorer is done
        if export_hf and completed > 0:
            final_model_dir = str(self.trainer.export_hf(self.job_dir, completed))
        return {"steps": completed, "final_model_dir": final_model_dir}

    def _save_checkpoint(self, step: int, keep: int | None) -> None:
        """The checkpoint of ``step``, after the read position its batch left the buffer
        at (never a later read's: a failed next step may have read one)."""
        if self._trained_position is not None:
            save_buffer_position(self.job_dir, step, self._trained_position)
        self.trainer.save_checkpoint(self.job_dir, step, keep)

    def _resume(self, step: int) -> None:
        """Continue after the full checkpoint of ``step`` (model, optimizer, LR, RNG)."""
        resumed = self.trainer.load_checkpoint(self.job_dir, step)
        if resumed != step:
            raise RuntimeError(
                f"asked to resume after step {step} but the full checkpoint loaded from "
                f"{self.job_dir} is step {resumed}"
            )
        if self.input.dataset is not None:  # sft/dpo: every step read rows_per_step rows
            self.input.dataset.reader.load_state_dict({"position": step * self.input.rows_per_step})
