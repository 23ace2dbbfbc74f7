"""The explorer: roll out tasks with the current policy and hand experiences on.

``explore_step`` reads a batch of tasks, runs their workflows on the runner pool and
returns the scored experiences with metrics; ``evaluate`` runs every eval taskset. With
``sync_style: fully_async`` the explorer has ``explorer.max_inflight_batches`` runner
pools (lanes), so that many steps roll out side by side: ``read_batch`` reads a step's
tasks in order and ``explore_step(step, tasks, lane)`` rolls them out on one lane.
``load_weights`` installs a new policy version from the trainer. The loop that calls
these is ``trinity.loop`` in one process and ``trinity.explorer.explore_loop`` in a run
(whose Ray actor, ``trinity.launch.roles``, hands it the buffer and synchronizer).
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

import trinity.rewards  # noqa: F401
import trinity.workflows  # noqa: F401  (registers the built-in workflows)
from trinity.buffer.task_reader import TasksetExhausted, TasksetMix, TasksetReader
from trinity.config import Config
from trinity.config.algorithm_defaults import defaults_for
from trinity.explorer.best_of_group import keep_best_of_group
from trinity.explorer.dynamic_sampling import Fill, fill_groups
from trinity.explorer.engines import ModelReplicas, RolloutEngines
from trinity.explorer.metrics import eval_metrics, rollout_metrics, score
from trinity.explorer.runner import OverRollout, RunnerPool, RunResult
from trinity.types import Experience, Task

# RunResult counts a step adds up over its rounds
_COUNTS = ("failed", "timed_out", "skipped", "cut", "partial", "retries", "refused_calls")


def make_taskset_reader(
    config: Config, storage, *, batch_size: int, is_eval: bool
) -> TasksetReader:
    buf = config.buffer
    return TasksetReader(
        storage,
        batch_size=batch_size,
        total_epochs=1 if is_eval else buf.total_epochs,
        total_steps=None if is_eval else training_batches(config),
        seed=config.seed if storage.data_selector.seed is None else storage.data_selector.seed,
        # resolve reads difficulty_based as random for the readers that get no feedback
        selector=(
            "difficulty_based"
            if storage.data_selector.selector_type == "difficulty_based" and not is_eval
            else storage.task_selector
        ),
        default_workflow=buf.explorer_input.default_workflow_type
        or buf.default_workflow_type
        or "math_workflow",
        default_reward_fn=buf.explorer_input.default_reward_fn_type or buf.default_reward_fn_type,
    )


def make_taskset_mix(config: Config) -> TasksetMix | None:
    """Every training taskset (``buffer.explorer_input.tasksets``) as one stream of batches."""
    inputs = config.buffer.explorer_input
    storages = list(inputs.tasksets) or ([inputs.taskset] if inputs.taskset is not None else [])
    if not storages:
        return None
    buf = config.buffer
    readers = [
        make_taskset_reader(config, storage, batch_size=buf.batch_size, is_eval=False)
        for storage in storages
    ]
    return TasksetMix(
        readers,
        batch_size=buf.batch_size,
        total_epochs=buf.total_epochs,
        total_steps=training_batches(config),
    )


def training_batches(config: Config) -> int | None:
    """Batches of tasks the training stream holds when ``buffer.total_steps`` is set: one
    per explore step, and with dynamic sampling up to ``1 + max_extra_rounds`` per step
    (its extra rounds read further batches; the explorer still stops after
    ``total_steps`` steps). None: the stream is cut by ``total_epochs``."""
    steps = config.buffer.total_steps
    sampling = config.algorithm.dynamic_sampling
    if steps is None or not sampling.enable:
        return steps
    return steps * (1 + sampling.max_extra_rounds)


def rollout_seed(seed: int, step: int, slot: int) -> int:
    """Sampling seed of the ``slot``-th task of explore step ``step``.

    A pure function of (seed, step, slot): the rollouts of a step do not depend on which
    requests the engine happened to batch together, nor on a restart before it.
    """
    return int(np.random.SeedSequence([seed % 2**32, step, slot]).generate_state(1)[0])


def taskset_metrics(experiences: list[Experience]) -> dict[str, float]:
    """``rollout/taskset/<name>/...``: the rollouts of each training taskset in a step."""
    by_taskset: dict[str, list[Experience]] = {}
    for exp in experiences:
        by_taskset.setdefault(str(exp.info.get("taskset", "")), []).append(exp)
    metrics: dict[str, float] = {}
    for name, exps in by_taskset.items():
        prefix = f"rollout/taskset/{name}"
        metrics[f"{prefix}/reward/mean"] = statistics.fmean(float(e.reward or 0.0) for e in exps)
        metrics[f"{prefix}/accuracy/mean"] = statistics.fmean(score(e) for e in exps)
        metrics[f"{prefix}/num_experiences"] = float(len(exps))
    return metrics


def task_pass_rates(experiences: list[Experience]) -> dict[str, dict[int, float]]:
    """Observed pass rate of each task rolled out, by taskset name, then row index: the
    mean accuracy (``score``: the ``reward/accuracy`` component, else the reward) of its
    experiences, clipped to [0, 1]. What ``difficulty_based`` selectors learn from."""
    scores: dict[tuple[str, int], list[float]] = {}
    for exp in experiences:
        key = (str(exp.info.get("taskset", "")), int(exp.info.get("task_index", exp.eid.task)))
        scores.setdefault(key, []).append(score(exp))
    rates: dict[str, dict[int, float]] = {}
    for (taskset, index), values in scores.items():
        rates.setdefault(taskset, {})[index] = min(max(statistics.fmean(values), 0.0), 1.0)
    return rates


class Explorer:
    """Owns the rollout engines, the runner pool and the tasksets."""

    def __init__(
        self,
        config: Config,
        *,
        model_dir: str | Path,
        log_dir: Path | None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.config = config
        self.logger = logger or logging.getLogger("trinity.explorer")
        ex = config.explorer
        self.engines = RolloutEngines.from_config(config, str(model_dir))
        self.served: list[ModelReplicas] = []
        try:
            # the rollout model first, then explorer.auxiliary_models (never sent weights)
            self.served.append(
                ModelReplicas(
                    config,
                    ex.rollout_model,
                    self.engines,
                    "explorer.rollout_model",
                    logger=self.logger,
                )
            )
            for i in range(len(ex.auxiliary_models)):
                self.served.append(ModelReplicas.auxiliary(config, i, logger=self.logger))
            self.models = self.served[0].wrappers
            self.model = self.models[0]
            inputs = config.buffer.explorer_input
            self.taskset = make_taskset_mix(config)
            self.eval_tasks: dict[str, list[Task]] = {}
            for storage in inputs.eval_tasksets:
                reader = make_taskset_reader(config, storage, batch_size=1, is_eval=True)
                self.eval_tasks[storage.name] = [self._as_eval(t) for t in reader.read_all()]
            self._taskset_lock = threading.Lock()  # lanes feed back while the loop reads
            num_runners = ex.runner_per_model * ex.rollout_model.engine_num
            fully_async = config.synchronizer.sync_style == "fully_async"
            self.lanes = [
                RunnerPool(
                    self.models,
                    num_runners=num_runners,
                    max_timeout=ex.max_timeout,
                    max_retry_times=ex.max_retry_times,
                    env_vars=ex.env_vars,
                    auxiliary_models=[served.wrappers for served in self.served[1:]],
                    log_dir=log_dir,
                    log_level=config.log.level,
                    max_repeat_times_per_runner=ex.max_repeat_times_per_runner,
                    first_index=lane * num_runners,
                )
                for lane in range(ex.max_inflight_batches if fully_async else 1)
            ]
            self.runners = self.lanes[0]  # evaluation runs here, with no step in flight
        except BaseException:
            # a failed start (a bad taskset, say) stops the engines it started, so a
            # caller that handles the error is not left with their threads running
            for served in self.served:
                served.close()
            self.engines.close()
            raise

    @staticmethod
    def _as_eval(task: Task) -> Task:
        task.is_eval = True
        return task

    @property
    def model_version(self) -> int:
        return self.engines.model_version

    def read_batch(self) -> list[Task] | None:
        """The next batch of training tasks; None when the taskset is exhausted."""
        if self.taskset is None:
            raise RuntimeError("exploring needs buffer.explorer_input.taskset")
        with self._taskset_lock:
            try:
                return self.taskset.read_batch()
            except TasksetExhausted:
                return None

    def _roll_out(
        self,
        step: int,
        round_: int,
        result: RunResult,
        tasks: list[Task] | None = None,
        lane: int = 0,
    ) -> list[Experience] | None:
        """Round ``round_`` of explore step ``step``: ``tasks`` (default: the next batch)
        rolled out on runner pool ``lane`` (counts added to ``result``); None when the
        taskset is exhausted."""
        tasks = self.read_batch() if tasks is None else tasks
        if tasks is None:
            return None
        first_slot = round_ * self.config.buffer.batch_size
        for slot, task in enumerate(tasks, start=first_slot):
            task.rollout_args.setdefault("seed", rollout_seed(self.config.seed, step, slot))
        part = self.lanes[lane].run_tasks(
            tasks, batch_id=step, over_rollout=self._over_rollout(tasks)
        )
        for name in _COUNTS:
            setattr(result, name, getattr(result, name) + getattr(part, name))
        result.abandoned_alive = part.abandoned_alive
        for exp in part.experiences:
            # the version of the weights that sampled it, which its model calls record (with
            # fully_async new weights may arrive mid-step); else the engines' version now
            exp.info.setdefault("model_version", self.model_version)
        return part.experiences

    def _over_rollout(self, tasks: list[Task]) -> OverRollout | None:
        """``explorer.over_rollout``: a round waits for ceil((1 - ratio) * its tasks) of
        its tasks, then at most ``wait_after_min`` seconds for the rest; ratio 0: all."""
        over = self.config.explorer.over_rollout
        if over.ratio <= 0:
            return None
        return OverRollout(
            enough=math.ceil(len(tasks) * (1 - over.ratio)),
            wait_s=over.wait_after_min,
            keep_partial=over.return_partial_tasks,
        )

    def explore_step(
        self, step: int, tasks: list[Task] | None = None, lane: int = 0
    ) -> tuple[list[Experience], dict[str, float]] | None:
        """Roll out one batch of tasks (``tasks``, default: the next batch read) on runner
        pool ``lane``; None when the taskset is exhausted.

        With ``algorithm.dynamic_sampling`` tied groups are dropped and further batches
        rolled out to refill the step (:mod:`trinity.explorer.dynamic_sampling`); for a
        type that trains on each group's best rollouts (raft) the others are masked
        (:mod:`trinity.explorer.best_of_group`).
        """
        algo = self.config.algorithm
        sampling = algo.dynamic_sampling
        start = time.perf_counter()
        result = RunResult()
        if sampling.enable:
            fill = fill_groups(
                lambda round_: self._roll_out(step, round_, result),
                batch_size=self.config.buffer.batch_size,
                max_extra_rounds=sampling.max_extra_rounds,
                metric_key=sampling.metric_key,
            )
            if fill.rounds == 0:
                return None
            result.experiences = fill.experiences
            sampled = fill.sampled
        else:
            experiences = self._roll_out(step, 0, result, tasks, lane)
            if experiences is None:
                return None
            result.experiences = sampled = experiences
        # difficulty_based selectors learn from everything rolled out, kept or not
        with self._taskset_lock:
            self.taskset.feedback(task_pass_rates(sampled))
        # the policy's rollout metrics cover everything it sampled, kept or not
        metrics = rollout_metrics(sampled)
        if len(self.taskset.readers) > 1:
            metrics.update(taskset_metrics(sampled))
        if sampling.enable:
            metrics.update(self._dynamic_sampling_metrics(step, fill))
        if defaults_for(algo.algorithm_type).best_of_group:
            masked = keep_best_of_group(result.experiences)
            metrics["rollout/best_of_group/masked"] = float(masked)
        metrics.update(
            {
                "rollout/failed_tasks": float(result.failed),
                "rollout/timed_out_tasks": float(result.timed_out),
                "rollout/skipped_tasks": float(result.skipped),
                "rollout/abandoned_threads": float(result.abandoned_alive),
                "rollout/refused_model_calls": float(result.refused_calls),
                # the oldest weights that sampled the step (all alike unless fully_async)
                "rollout/model_version": float(
                    min((e.model_version for e in result.experiences), default=self.model_version)
                ),
                "rollout/num_experiences": float(len(result.experiences)),
                "time/explore_step": time.perf_counter() - start,
            }
        )
        if metrics["rollout/reward_errors"]:
            self.logger.warning(
                "explore step %d: the reward function raised on %d rollout(s), rewarded 0 "
                "(tracebacks in explorer_runner_*.log)",
                step,
                int(metrics["rollout/reward_errors"]),
            )
        if result.failed or result.timed_out or result.skipped:
            self.logger.warning(
                "explore step %d: %d task(s) failed, %d timed out, %d skipped "
                "(see explorer_runner_*.log)",
                step,
                result.failed,
                result.timed_out,
                result.skipped,
            )
        if self.config.explorer.over_rollout.ratio > 0:
            metrics["rollout/over_rollout/cut_tasks"] = float(result.cut)
            metrics["rollout/over_rollout/partial_tasks"] = float(result.partial)
        if result.cut:
            self.logger.info(
                "explore step %d: over-rollout cut %d slow task(s) (finished runs of %d kept)",
                step,
                result.cut,
                result.partial,
            )
        return result.experiences, metrics

    def _dynamic_sampling_metrics(self, step: int, fill: Fill) -> dict[str, float]:
        if fill.kept_groups < self.config.buffer.batch_size:
            self.logger.warning(
                "explore step %d: dynamic sampling kept %d of %d groups after %d round(s) "
                "(%d tied groups dropped%s); %d tied group(s) put back to fill the step",
                step,
                fill.kept_groups,
                self.config.buffer.batch_size,
                fill.rounds,
                fill.dropped_groups,
                ", taskset exhausted" if fill.exhausted else "",
                fill.topped_up_groups,
            )
        prefix = "rollout/dynamic_sampling"
        return {
            f"{prefix}/dropped_groups": float(fill.dropped_groups),
            f"{prefix}/kept_groups": float(fill.kept_groups),
            f"{prefix}/surplus_groups": float(fill.surplus_groups),
            f"{prefix}/rounds": float(fill.rounds),
            f"{prefix}/topped_up_groups": float(fill.topped_up_groups),
        }

    def evaluate(self, step: int) -> dict[str, float]:
        """Run every eval taskset once with the current weights."""
        metrics: dict[str, float] = {}
        start = time.perf_counter()
        for name, tasks in self.eval_tasks.items():
            result = self.runners.run_tasks(tasks, batch_id=f"eval_{step}")
            k = max((t.repeat_times for t in tasks), default=1)
            metrics.update(eval_metrics(name, result.experiences, k))
            not_done = result.failed + result.timed_out + result.skipped
            if not_done:
                metrics[f"eval/{name}/failed_tasks"] = float(not_done)
        metrics["time/eval"] = time.perf_counter() - start
        return metrics

    def load_weights(self, state_dict: dict[str, Any], version: int) -> None:
        self.engines.load_state_dict(state_dict, version)
        self.logger.info("loaded policy version %d", version)

    def state_dict(self) -> dict[str, Any]:
        return {
            "taskset": self.taskset.state_dict() if self.taskset else None,
            "model_version": self.model_version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.taskset is not None and state.get("taskset"):
            self.taskset.load_state_dict(state["taskset"])

    def close(self) -> None:
        for lane in self.lanes:
            lane.close()
        for served in self.served:
            served.close()
        self.engines.close()
