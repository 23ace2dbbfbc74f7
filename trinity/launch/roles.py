"""The explorer and trainer loops, each as a class that runs inside its own Ray actor.

Both talk to the experience buffer and the synchronizer through Ray handles:

    explorer: [eval] -> for each step: wait for weights -> roll out -> buffer.put -> [eval]
    trainer:  for each step: read a batch -> train -> publish weights -> [save]

In mode explore the explorer runs alone with its initial weights; in mode train the
trainer runs alone and publishes nothing. sft and dpo read their dataset directly
instead of the buffer (``trinity.trainer.train_input``). Each actor first imports the
run's ``--plugin-dir`` modules, so the parts they register exist in its process too.

The step bodies are ``trinity.loop``'s (``hand_on``: pipeline and buffer; ``train``: a
batch and an update), the loop a newcomer reads first; these classes add what a
distributed run needs around them: the sync schedule and transports, steps in flight,
evaluation, monitors, checkpoints and resume.

With ``sync_interval`` i and ``sync_offset`` o, before explore step s the explorer needs
policy version ``((s - 1 - o) // i) * i`` (the newest version the trainer publishes
without waiting for experiences the explorer has not produced yet). With i = 1 and
o = 0 this is the synchronous schedule: explore 1, train 1, explore 2 with version 1, ...
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ray

from trinity import loop
from trinity.config import Config
from trinity.explorer.rollout_clock import RolloutClock
from trinity.launch.actor_start import start_actor
from trinity.launch.resume import (
    derived_explorer_state,
    explorer_state_at,
    save_buffer_position,
    save_explorer_state,
)
from trinity.launch.trainer_group import build_rank0
from trinity.sync import weights
from trinity.sync.watcher import WeightWatcher
from trinity.trainer import checkpoint as ckpt
from trinity.utils.memory import TrainerHeap, release_free_memory
from trinity.utils.threads import on_torch_thread, torch_thread_method


def required_version(step: int, sync_interval: int, sync_offset: int) -> int:
    """Policy version explore step ``step`` (1-based) must use (``trinity.sync.weights``)."""
    return weights.required_version(step, sync_interval, sync_offset)


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
        self.config = config
        self.job_dir = Path(job_dir)
        self.logger = start_actor(config, self.job_dir, config.explorer.name, plugin_dirs)
        from trinity.explorer.explorer import Explorer

        self.buffer = buffer
        self.sync = synchronizer
        self.monitor = _monitor(config, self.job_dir, "explorer")
        self.explorer = Explorer(
            config, model_dir=model_dir, log_dir=self.job_dir / "log", logger=self.logger
        )
        self.pipeline = loop.experience_pipeline(config, self.job_dir)
        self.weights = weights.WeightReceiver(
            config,
            self.job_dir,
            synchronizer,
            model_dir,
            self.logger,
            engines=self.explorer.engines,
        )
        initial = self.weights.initial_adapter()  # LoRA continuing a saved adapter
        if initial is not None:
            self.explorer.load_weights(initial, 0)
        self.clock = RolloutClock()  # what held the rollouts up, per step
        # mode colocate: the engines' KV memory is the trainer's while it steps
        self.handover = None
        if config.cluster.colocate:
            from trinity.explorer.engines import MemoryHandover

            self.handover = MemoryHandover(self.explorer.engines.engines)

    def run(self, total_steps: int, start_step: int = 0) -> dict[str, Any]:
        cfg = self.config
        evals: list[dict[str, float]] = []
        if start_step > 0:
            self._resume(start_step)
        if cfg.explorer.eval_on_startup and start_step == 0:
            self._evaluate(0, evals)
        fully_async = cfg.synchronizer.sync_style == "fully_async"
        explore = self._explore_in_flight if fully_async else self._explore_in_turn
        step = start_step
        try:
            step = explore(start_step, total_steps, evals)
        finally:
            ray.get(self.buffer.close.remote())
        if cfg.mode == "both" and step > start_step:
            # the final policy: wait until the trainer has consumed the last batch
            self._sync_to(step)
            self._evaluate(step, evals)
        self.weights.close()
        ray.get(self.sync.finish.remote("explorer"))
        self.monitor.close()
        return {
            "steps": step,
            "first_eval": evals[0] if evals else None,
            "last_eval": evals[-1] if evals else None,
        }

    def _explore_in_turn(self, start_step: int, total_steps: int, evals: list) -> int:
        """Each step waits for the weights its ``sync_style`` asks for, then rolls out;
        returns the last step explored."""
        step = start_step
        for step in range(start_step + 1, total_steps + 1):
            start = time.perf_counter()
            self._take(self.weights.before_step(step, self.explorer.model_version))
            waited = time.perf_counter() - start
            release_free_memory()  # what loading the new weights freed
            if self.handover is not None:
                self.handover.retake()
            # evaluate the weights trained by step - 1, before exploring with them
            if step - 1 > start_step and (step - 1) % self.config.explorer.eval_interval == 0:
                self._evaluate(step - 1, evals)
            self.logger.info(
                "explore step %d begins (policy version %d)", step, self.explorer.model_version
            )
            produced = self._roll_out(step)
            if produced is None:
                self.logger.info("taskset exhausted before step %d", step)
                return step - 1
            experiences, metrics = produced
            metrics.update(self.clock.step_metrics(step))
            metrics["time/wait_weights"] += waited
            if self.handover is not None:  # the trainer steps on these experiences now
                self.handover.release()
            self._hand_on(step, experiences, metrics, self.explorer.state_dict())
        return step

    def _explore_in_flight(self, start_step: int, total_steps: int, evals: list) -> int:
        """``fully_async``: up to ``max_inflight_batches`` steps roll out side by side (step
        s on lane (s - 1) % n) and are handed on in order, the oldest before another
        starts; a background thread installs new weights as they are published. Returns
        the last step handed on."""
        lanes = len(self.explorer.lanes)
        inflight: deque[tuple[int, Future, dict[str, Any]]] = deque()
        done = start_step
        watcher = WeightWatcher(
            lambda: self.weights.newest(self.explorer.model_version), self._take, self.logger
        )
        watcher.start()
        try:
            with ThreadPoolExecutor(lanes, thread_name_prefix="explore-lane") as pool:
                for step in range(start_step + 1, total_steps + 1):
                    watcher.check()
                    interval = self.config.explorer.eval_interval
                    evaluate = step - 1 > start_step and (step - 1) % interval == 0
                    # evaluation runs on lane 0: every step in flight ends first
                    while inflight and (evaluate or len(inflight) >= lanes):
                        done = self._hand_on_oldest(inflight)
                    if evaluate:
                        self._evaluate(step - 1, evals)
                    tasks = self.explorer.read_batch()
                    if tasks is None:
                        self.logger.info("taskset exhausted before step %d", step)
                        break
                    state = self.explorer.state_dict()  # the taskset right after this read
                    self.logger.info(
                        "explore step %d begins (policy version %d, %d step(s) in flight)",
                        step,
                        self.explorer.model_version,
                        len(inflight),
                    )
                    lane = (step - 1) % lanes
                    inflight.append((step, pool.submit(self._roll_out, step, tasks, lane), state))
                while inflight:
                    done = self._hand_on_oldest(inflight)
        finally:
            watcher.stop()
        watcher.check()
        return done

    def _hand_on_oldest(self, inflight: deque[tuple[int, Future, dict[str, Any]]]) -> int:
        step, future, state = inflight.popleft()
        experiences, metrics = future.result()
        # no wait before the step: only the installs (by the watcher's thread) while it rolled out
        metrics.update(self.clock.step_metrics(step))
        self._hand_on(step, experiences, metrics, state)
        return step

    def _roll_out(self, step: int, *lane_args: Any) -> tuple[list, dict[str, float]] | None:
        """``explore_step`` timed by the rollout clock (``time/wait_weights``, ``time/explorer_idle``)."""
        with self.clock.rolling(step):
            return self.explorer.explore_step(step, *lane_args)

    def _hand_on(
        self, step: int, experiences: list, metrics: dict[str, float], state: dict[str, Any]
    ) -> None:
        """Explore step ``step``'s experiences through the pipeline into the buffer
        (``trinity.loop.hand_on``), with its metrics; ``state`` is the explorer's state
        after it, recorded first."""
        # recorded before the trainer can see this step, so a checkpoint of step N always
        # finds the explorer's state after step N
        save_explorer_state(self.job_dir, step, state)
        loop.hand_on(step, experiences, metrics, self.pipeline, self._put)
        self.monitor.log(metrics, step)
        ray.get(self.sync.report.remote("explorer", step, metrics))
        self.logger.info("explore step %d ends: %s", step, _brief(metrics))
        release_free_memory()

    def _put(self, experiences: list) -> None:
        ray.get(self.buffer.put.remote(experiences))

    def _resume(self, step: int) -> None:
        """Continue after ``step``: its taskset position and (mode both) its checkpoint."""
        state = explorer_state_at(self.job_dir, step) or derived_explorer_state(self.config, step)
        self.explorer.load_state_dict(state)
        if self.config.mode == "both":
            # merges the shards of however many trainer ranks wrote the checkpoint
            actor_dir = ckpt.step_dir(self.job_dir, step) / "actor"
            from trinity.trainer.checkpoint_merge import load_fsdp_state_dict_from_verl_checkpoint

            state = load_fsdp_state_dict_from_verl_checkpoint(actor_dir)
            self.explorer.load_weights(self.weights.full_weights(state), step)
        self.logger.info("resumed the explorer after step %d", step)

    def _sync_to(self, version: int) -> None:
        if version <= self.explorer.model_version:
            return
        self.logger.info("waiting for policy version %d", version)
        self._take(self.weights.wait_for(version, self.explorer.model_version))

    def _take(self, fetched: tuple[int, dict] | None) -> None:
        if fetched is None:
            return
        start = time.perf_counter()
        got, state_dict = fetched
        try:
            if state_dict is not None:  # None: a broadcast already loaded every engine
                with self.clock.installing():
                    self.explorer.load_weights(state_dict, got)
        finally:
            self.weights.release()  # the slot's version is copied: it may be overwritten
        self.logger.info(
            "synchronized to policy version %d in %.2fs", got, time.perf_counter() - start
        )

    def _evaluate(self, step: int, history: list[dict[str, float]]) -> None:
        if not self.explorer.eval_tasks:
            return
        self.logger.info(
            "evaluation at step %d begins (policy version %d)", step, self.explorer.model_version
        )
        metrics = self.explorer.evaluate(step)
        self.monitor.log(metrics, step)
        ray.get(self.sync.report.remote("eval", step, metrics))
        self.logger.info("evaluation at step %d: %s", step, _brief(metrics))
        release_free_memory()
        history.append(metrics)

    def close(self) -> None:
        self.pipeline.close()  # stops an auto-started Data-Juicer service
        self.explorer.close()


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
        self.job_dir = Path(job_dir)
        self.logger = start_actor(config, self.job_dir, config.trainer.name, plugin_dirs)
        from trinity.sync.collective import start_sender
        from trinity.trainer.train_input import TrainInput
        from trinity.trainer.trainer import Trainer

        self.buffer = buffer
        self.sync = synchronizer
        self.monitor = _monitor(config, self.job_dir, "trainer")
        self.heap = TrainerHeap(config.trainer.keep_memory_between_steps)
        if self.heap.keeps:  # each step reuses the last one's pages (utils/memory.py)
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
        self.input = TrainInput(
            config, self.trainer.tokenizer, self._read_buffer if buffer is not None else None
        )
        # sync_method nccl: rank 0 hosts the weight broadcast group and serves it
        self.sender = start_sender(config, synchronizer, self.logger)
        # sync_method memory on one node: the shared-memory slot (trinity.sync.weight_slot)
        self.slot = weights.slot_writer(config, synchronizer)
        self._published = 0  # the newest policy version this trainer published
        # the buffer's read position after the last batch read, and after the last one
        # a finished step trained on (the one its checkpoint keeps)
        self._read_position: dict[str, Any] | None = None
        self._trained_position: dict[str, Any] | None = None
        if self.slot is not None:
            self.logger.info("weights are published through the shared file %s", self.slot.path)

    @torch_thread_method
    def shutdown_ranks(self) -> None:
        """Leave the data-parallel process group together with the other ranks."""
        self.trainer.shutdown()

    def _read_buffer(self, n: int) -> list:
        timeout = self.config.buffer.trainer_input.experience_buffer.max_read_timeout
        batch = self.buffer.read.remote(n, timeout)
        if self._answers_requests():
            # explorer_driven: the explorer may wait for these weights before it explores
            # the steps this batch needs
            while not ray.wait([batch], timeout=weights.POLL_S)[0]:
                step = self.trainer.global_step
                if step > self._published and ray.get(self.sync.sync_requested.remote()):
                    self._publish(step)
        experiences, self._read_position = ray.get(batch)
        return experiences

    def _answers_requests(self) -> bool:
        cfg = self.config
        return cfg.mode == "both" and cfg.synchronizer.sync_style == "explorer_driven"

    @torch_thread_method
    def run(self, total_steps: int, start_step: int = 0, export_hf: bool = False) -> dict[str, Any]:
        """Train ``total_steps`` steps; ``export_hf`` also writes the final policy as a
        Hugging Face directory (``final_model_dir``), where the next stage starts."""
        cfg = self.config
        keep = cfg.trainer.trainer_config.trainer.max_actor_ckpt_to_keep
        step = completed = start_step
        final_model_dir = None
        if start_step > 0:
            self._resume(start_step)
        # explorers of this job in other processes (mode explore) wait for it while running
        weights.set_trainer_status(self.job_dir, "running")
        try:
            for step in range(start_step + 1, total_steps + 1):
                trained = loop.train(self.trainer, self.input, step)
                if trained is None:
                    self.logger.info("the trainer's input ended before step %d", step)
                    step -= 1
                    break
                _, metrics = trained
                # nothing of the step is alive now: unless kept, its freed tensors go back
                # to the OS before the weights are published (the explorer grows while it
                # loads them); the next step faults its pages in again (utils/memory.py)
                self.heap.after_step()
                self.monitor.log(metrics, step)
                ray.get(self.sync.report.remote("trainer", step, metrics))
                self.logger.info("train step %d ends: %s", step, _brief(metrics))
                completed = step
                self._trained_position = self._read_position
                requested = self._answers_requests() and ray.get(self.sync.sync_requested.remote())
                if weights.publishes(cfg) and weights.trainer_publishes_at(
                    cfg, step, total_steps, requested
                ):
                    self._publish(step)
                if cfg.trainer.save_interval > 0 and step % cfg.trainer.save_interval == 0:
                    self._save_checkpoint(step, keep)
        finally:
            # the final weights are always kept; a failed step is never saved
            if completed > start_step and ckpt.read_latest(self.job_dir) != completed:
                self._save_checkpoint(completed, keep)
            weights.set_trainer_status(self.job_dir, "finished")
            ray.get(self.sync.finish.remote("trainer"))
            self.monitor.close()
            if self.slot is not None:
                self.slot.close()  # the driver removes the file once the explorer is done
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

    def _publish(self, step: int) -> None:
        start = time.perf_counter()
        weights.publish(
            self.trainer, self.config, self.job_dir, self.sync, step, self.sender, self.slot
        )
        self._published = step
        self.logger.info("published policy version %d in %.2fs", step, time.perf_counter() - start)


def _brief(metrics: dict[str, float], limit: int = 8) -> str:
    keys = [k for k in metrics if k.endswith("/mean") or "loss" in k][:limit]
    return ", ".join(f"{k}={metrics[k]:.4g}" for k in keys)
