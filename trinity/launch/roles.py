"""The explorer's and the trainer's Ray actors: each builds its role's parts and runs its loop.

    explorer: ``trinity.explorer.explore_loop.ExploreLoop`` (weights, rollouts, eval)
    trainer:  ``trinity.trainer.train_loop.TrainLoop`` (batches, updates, checkpoints),
              publishing through ``trinity.sync.publisher.WeightPublisher``

The loops are plain classes; these actors hand them what lives in other Ray actors: the
experience buffer (put, read, close) and the synchronizer (each step's report, the end
of a role, explorer_driven's weight requests). In mode explore the explorer runs alone
with its initial weights; in mode train the trainer runs alone and publishes nothing.
sft and dpo read their dataset directly instead of the buffer
(``trinity.trainer.train_input``). Each actor first imports the run's ``--plugin-dir``
modules, so the parts they register exist in its process too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray

from trinity.config import Config
from trinity.explorer.explore_loop import ExploreLoop, experience_pipeline
from trinity.launch.actor_start import start_actor
from trinity.launch.trainer_group import build_rank0
from trinity.sync import weights
from trinity.sync.publisher import WeightPublisher
from trinity.trainer.train_loop import TrainLoop
from trinity.utils.memory import TrainerHeap
from trinity.utils.threads import on_torch_thread, torch_thread_method


def _monitor(config: Config, job_dir: Path, role: str):
    from trinity.config import to_dict
    from trinity.monitor import make_monitor

    return make_monitor(
        config.monitor.monitor_type,
        project=config.project,
        name=config.name,
        role=role,
        job_dir=job_dir,
        monitor_args=config.monitor.monitor_args,
        config_dict=to_dict(config),
    )


class _SynchronizerLink:
    """A loop's reports, through the run's ``Synchronizer`` actor."""

    def __init__(self, synchronizer: Any) -> None:
        self.sync = synchronizer

    def report(self, role: str, step: int, metrics: dict[str, float]) -> None:
        ray.get(self.sync.report.remote(role, step, metrics))

    def finish(self, role: str) -> None:
        ray.get(self.sync.finish.remote(role))


class _ExplorerLink(_SynchronizerLink):
    """The explorer's peers: the ``BufferActor`` and the ``Synchronizer``."""

    def __init__(self, buffer: Any, synchronizer: Any) -> None:
        super().__init__(synchronizer)
        self.buffer = buffer

    def put(self, experiences: list) -> None:
        ray.get(self.buffer.put.remote(experiences))

    def close_buffer(self) -> None:
        ray.get(self.buffer.close.remote())


class ExplorerRole:
    def __init__(
        self,
        config: Config,
        job_dir: str,
        model_dir: str,
        buffer,
        synchronizer,
        plugin_dirs: Sequence[str] = (),
    ) -> None:
        job_path = Path(job_dir)
        logger = start_actor(config, job_path, config.explorer.name, plugin_dirs)
        from trinity.explorer.explorer import Explorer

        monitor = _monitor(config, job_path, "explorer")
        explorer = Explorer(config, model_dir=model_dir, log_dir=job_path / "log", logger=logger)
        pipeline = experience_pipeline(
            config.data_processor.experience_pipeline, config.service.data_juicer, job_path
        )
        receiver = weights.WeightReceiver(
            config, job_path, synchronizer, model_dir, logger, engines=explorer.engines
        )
        initial = receiver.initial_adapter()  # LoRA continuing a saved adapter
        if initial is not None:
            explorer.load_weights(initial, 0)
        # mode colocate: the engines' KV memory is the trainer's while it steps
        handover = None
        if config.cluster.colocate:
            from trinity.explorer.engines import MemoryHandover

            handover = MemoryHandover(explorer.engines.engines)
        link = _ExplorerLink(buffer, synchronizer)
        self.loop = ExploreLoop(
            config, job_path, explorer, pipeline, receiver, monitor, link, logger, handover
        )

    def run(self, total_steps: int, start_step: int = 0) -> dict[str, Any]:
        return self.loop.run(total_steps, start_step)

    def close(self) -> None:
        self.loop.close()


# seconds between the log lines of a trainer waiting for its batch
READ_WAIT_LOG_S = 60.0


def wait_message(step: int, wanted: int, have: int | None, waited: float, timeout: float) -> str:
    """The log line of a train step still waiting for its experiences."""
    more = f"{max(wanted - have, 0)} more of {wanted}" if have is not None else f"{wanted}"
    return (
        f"train step {step}: waited {waited:.0f} s for {more} experiences from the "
        f"experience buffer (after buffer.trainer_input.experience_buffer.max_read_timeout "
        f"{timeout:g} s it trains on those there are)"
    )


class TrainerRole:
    def __init__(
        self,
        config: Config,
        job_dir: str,
        model_dir: str,
        buffer,
        synchronizer,
        total_steps: int,
        plugin_dirs: Sequence[str] = (),
        critic_model_dir: str | None = None,
        workers: Sequence[Any] = (),
    ) -> None:
        """``workers``: the ``TrainerRank`` actors of ranks 1..N-1 (data parallelism);
        this actor is rank 0 and starts every collective step on all ranks."""
        self.config = config
        job_path = Path(job_dir)
        self.logger = start_actor(config, job_path, config.trainer.name, plugin_dirs)
        from trinity.trainer.trainer import Trainer

        self.buffer = buffer
        monitor = _monitor(config, job_path, "trainer")
        heap = TrainerHeap(config.trainer.keep_memory_between_steps)
        if heap.keeps:  # each step reuses the last one's pages (utils/memory.py)
            self.logger.info("the trainer keeps the memory a step frees for the next step")
        else:
            self.logger.info("the trainer returns the memory a step frees to the OS")
        # loaded on the thread that will train it: one OpenMP team (trinity.utils.threads)
        self.trainer = on_torch_thread(
            build_rank0,
            config,
            workers,
            lambda rank_info: Trainer(
                config,
                model_dir=model_dir,
                total_steps=total_steps,
                logger=self.logger,
                critic_model_dir=critic_model_dir,
                rank_info=rank_info,
            ),
        )
        self.publisher = WeightPublisher(config, job_path, self.trainer, synchronizer, self.logger)
        self.loop = TrainLoop(
            config,
            job_path,
            self.trainer,
            self._read_buffer if buffer is not None else None,
            heap,
            monitor,
            _SynchronizerLink(synchronizer),
            self.publisher,
            self.logger,
        )

    @torch_thread_method
    def shutdown_ranks(self) -> None:
        """Leave the data-parallel process group together with the other ranks."""
        self.trainer.shutdown()

    def _read_buffer(self, n: int) -> tuple[list, dict[str, Any] | None]:
        """``n`` experiences from the ``BufferActor`` and its read position after them;
        a long wait is logged every ``READ_WAIT_LOG_S`` seconds."""
        timeout = self.config.buffer.trainer_input.experience_buffer.max_read_timeout
        batch = self.buffer.read.remote(n, timeout)
        # explorer_driven: the explorer may wait for these weights before it explores
        # the steps this batch needs, so its requests are answered while waiting
        answers = self.publisher.answers_requests
        start, logged = time.monotonic(), 0
        while not ray.wait([batch], timeout=weights.POLL_S if answers else READ_WAIT_LOG_S)[0]:
            if answers:
                self.publisher.if_requested()
            waited = time.monotonic() - start
            if waited >= (logged + 1) * READ_WAIT_LOG_S:
                logged = int(waited // READ_WAIT_LOG_S)
                self.logger.info(
                    wait_message(
                        self.trainer.global_step + 1,
                        n,
                        ray.get(self.buffer.size.remote()),
                        waited,
                        timeout,
                    )
                )
        return ray.get(batch)

    @torch_thread_method
    def run(self, total_steps: int, start_step: int = 0, export_hf: bool = False) -> dict[str, Any]:
        """Train ``total_steps`` steps; ``export_hf`` also writes the final policy as a
        Hugging Face directory (``final_model_dir``), where the next stage starts."""
        return self.loop.run(total_steps, start_step, export_hf)
