"""The trainer's end of weight synchronisation in a run: when it publishes, and how.

After each train step :meth:`WeightPublisher.after_step` publishes the policy when the
schedule says so (:func:`trinity.sync.weights.trainer_publishes_at`); with
``sync_style: explorer_driven`` in mode both it answers the explorer's requests, also
while it waits for a batch (:meth:`WeightPublisher.if_requested`). ``trainer_status.json``
tells explorers of the same job in other processes whether to wait for it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trinity.config import Config
from trinity.sync import weights

if TYPE_CHECKING:
    from trinity.trainer.trainer import Trainer


class WeightPublisher:
    """Publishes ``trainer``'s policy through the run's ``synchronizer`` (a Ray actor)."""

    def __init__(
        self,
        config: Config,
        job_dir: Path,
        trainer: Trainer,
        synchronizer: Any,
        logger: logging.Logger,
    ) -> None:
        from trinity.sync.collective import start_sender

        self.config = config
        self.job_dir = Path(job_dir)
        self.trainer = trainer
        self.sync = synchronizer
        self.logger = logger
        # sync_method nccl: rank 0 hosts the weight broadcast group and serves it
        self.sender = start_sender(config, synchronizer, logger)
        # sync_method memory on one node: the shared-memory slot (trinity.sync.weight_slot)
        self.slot = weights.slot_writer(config, synchronizer)
        self.published = 0  # the newest policy version this trainer published
        if self.slot is not None:
            logger.info("weights are published through the shared file %s", self.slot.path)

    @property
    def answers_requests(self) -> bool:
        """``explorer_driven`` in mode both: the explorer asks for weights."""
        cfg = self.config
        return cfg.mode == "both" and cfg.synchronizer.sync_style == "explorer_driven"

    def start(self) -> None:
        # explorers of this job in other processes (mode explore) wait for it while running
        weights.set_trainer_status(self.job_dir, "running")

    def after_step(self, step: int, total_steps: int) -> None:
        """Publish the policy of train step ``step`` if the schedule asks for it."""
        import ray

        cfg = self.config
        requested = self.answers_requests and ray.get(self.sync.sync_requested.remote())
        if weights.publishes(cfg) and weights.trainer_publishes_at(
            cfg, step, total_steps, requested
        ):
            self.publish(step)

    def if_requested(self) -> None:
        """Publish the trainer's current policy if the explorer asked for newer weights
        (the explorer may wait for them before it explores the steps a batch needs)."""
        import ray

        step = self.trainer.global_step
        if step > self.published and ray.get(self.sync.sync_requested.remote()):
            self.publish(step)

    def publish(self, step: int) -> None:
        start = time.perf_counter()
        weights.publish(
            self.trainer, self.config, self.job_dir, self.sync, step, self.sender, self.slot
        )
        self.published = step
        self.logger.info("published policy version %d in %.2fs", step, time.perf_counter() - start)

    def stop(self) -> None:
        weights.set_trainer_status(self.job_dir, "finished")

    def close(self) -> None:
        if self.slot is not None:
            self.slot.close()
