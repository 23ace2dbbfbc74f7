"""The explorer's loop in a run: [eval] -> for each step: wait for weights -> roll out -> hand on -> [eval].

:func:`hand_on` is one step's body after the rollout (``trinity.loop`` runs it in one
process); :class:`ExploreLoop` adds what a run needs around it: the sync schedule
(``sync_style``), steps in flight (``fully_async``), evaluation, monitors and resume.
What crosses processes on Ray (the experience buffer, reporting each step) is handed
in as an :class:`ExplorerLink`: ``trinity.launch.roles.ExplorerRole`` wires it.

With ``sync_interval`` i and ``sync_offset`` o, before explore step s the explorer needs
policy version ``((s - 1 - o) // i) * i`` (the newest version the trainer publishes
without waiting for experiences the explorer has not produced yet). With i = 1 and
o = 0 this is the synchronous schedule: explore 1, train 1, explore 2 with version 1, ...
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trinity.config import Config, DataJuicerServiceConfig, ExperiencePipelineConfig
from trinity.explorer.explorer_state import (
    derived_explorer_state,
    explorer_state_at,
    save_explorer_state,
)
from trinity.explorer.rollout_clock import RolloutClock
from trinity.sync.watcher import WeightWatcher
from trinity.trainer import checkpoint as ckpt
from trinity.trainer.train_loop import staleness
from trinity.utils.log import metrics_brief
from trinity.utils.memory import release_free_memory

if TYPE_CHECKING:  # torch and the models load with the explorer, not with this module
    from trinity.explorer.engines import MemoryHandover
    from trinity.explorer.explorer import Explorer
    from trinity.monitor.base import Monitor
    from trinity.pipeline import ExperiencePipeline
    from trinity.sync.weights import WeightReceiver
    from trinity.types import Experience


def experience_pipeline(
    pipe: ExperiencePipelineConfig,
    data_juicer: DataJuicerServiceConfig | None,
    job_dir: Path | None,
) -> ExperiencePipeline:
    """``data_processor.experience_pipeline`` (its Data-Juicer operators served by
    ``service.data_juicer``); with ``save_input`` every batch it gets is also appended to
    ``input_save_path`` (default: ``<job_dir>/buffer/...``)."""
    from trinity.pipeline import ExperiencePipeline

    save_path = pipe.input_save_path
    if not save_path and job_dir is not None:
        save_path = Path(job_dir) / "buffer" / "experience_pipeline_input.jsonl"
    return ExperiencePipeline(pipe.operators, save_path if pipe.save_input else None, data_juicer)


def hand_on(
    step: int,
    experiences: list[Experience],
    metrics: dict[str, float],
    pipeline: ExperiencePipeline,
    put: Callable[[list[Experience]], Any],
) -> list[Experience]:
    """Explore step ``step``'s experiences through the experience pipeline into the buffer
    (``put``); adds the step's staleness and the pipeline's metrics to ``metrics`` and
    returns what was put."""
    metrics["rollout/staleness"] = float(staleness(step, int(metrics["rollout/model_version"])))
    experiences, pipeline_metrics = pipeline.process(experiences)
    metrics.update(pipeline_metrics)
    put(experiences)
    return experiences


class ExplorerLink(Protocol):
    """The explorer's peers in a run (on Ray: the buffer and the ``Synchronizer`` actors)."""

    def put(self, experiences: list[Experience]) -> None:
        """Into the experience buffer; returns once they are there."""

    def close_buffer(self) -> None:
        """No more experiences: a reader waiting for a batch gets what is left."""

    def report(self, role: str, step: int, metrics: dict[str, float]) -> None: ...

    def finish(self, role: str) -> None: ...


# (step, its rollout, the explorer's state right after its tasks were read)
InFlight = deque[tuple[int, Future, dict[str, Any]]]


class ExploreLoop:
    """Explore steps ``start_step + 1 .. total_steps`` of one run with ``explorer``.

    ``receiver``: the trainer's published weights; ``handover`` (mode colocate): the
    engines' KV memory, the trainer's while it steps.
    """

    def __init__(
        self,
        config: Config,
        job_dir: Path,
        explorer: Explorer,
        pipeline: ExperiencePipeline,
        receiver: WeightReceiver,
        monitor: Monitor,
        link: ExplorerLink,
        logger: logging.Logger,
        handover: MemoryHandover | None = None,
    ) -> None:
        self.config = config
        self.job_dir = Path(job_dir)
        self.explorer = explorer
        self.pipeline = pipeline
        self.weights = receiver
        self.monitor = monitor
        self.link = link
        self.logger = logger
        self.handover = handover
        self.clock = RolloutClock()  # what held the rollouts up, per step

    def run(self, total_steps: int, start_step: int = 0) -> dict[str, Any]:
        """Explore, evaluate at ``eval_interval``; the first and last evaluations' metrics."""
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
            self.link.close_buffer()
        if cfg.mode == "both" and step > start_step:
            # the final policy: wait until the trainer has consumed the last batch
            self._sync_to(step)
            self._evaluate(step, evals)
        self.weights.close()
        self.link.finish("explorer")
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
        inflight: InFlight = deque()
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

    def _hand_on_oldest(self, inflight: InFlight) -> int:
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
        (:func:`hand_on`), with its metrics; ``state`` is the explorer's state after it,
        recorded first."""
        # recorded before the trainer can see this step, so a checkpoint of step N always
        # finds the explorer's state after step N
        save_explorer_state(self.job_dir, step, state)
        hand_on(step, experiences, metrics, self.pipeline, self.link.put)
        self.monitor.log(metrics, step)
        self.link.report("explorer", step, metrics)
        self.logger.info("explore step %d ends: %s", step, metrics_brief(metrics))
        release_free_memory()

    def _resume(self, step: int) -> None:
        """Continue after ``step``: its taskset position and (mode both) its checkpoint."""
        state = explorer_state_at(self.job_dir, step) or derived_explorer_state(
            self.config.buffer, step
        )
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
        self.link.report("eval", step, metrics)
        self.logger.info("evaluation at step %d: %s", step, metrics_brief(metrics))
        release_free_memory()
        history.append(metrics)

    def close(self) -> None:
        self.pipeline.close()  # stops an auto-started Data-Juicer service
        self.explorer.close()
