"""Workflow runners: run tasks concurrently, retry failures, time out hung ones.

Each runner is a worker thread with its own log file ``explorer_runner_<n>.log``. The
rollout engine merges the concurrent requests of all runners into shared decode batches.
A task that raises is retried up to ``max_retry_times``; a task that neither finishes
nor fails within ``max_timeout`` seconds is counted as timed out and abandoned (its
thread finishes in the background and its result is dropped). Failures never stop the
step: they are counted, logged with their traceback, and the step completes with the rest.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from trinity.types import EID, Experience, Task
from trinity.utils.log import get_actor_logger
from trinity.workflows.registry import WORKFLOWS


@dataclass
class RunResult:
    """What one call of ``run_tasks`` produced."""

    experiences: list[Experience] = field(default_factory=list)
    failed: int = 0  # tasks that raised on every try
    timed_out: int = 0  # tasks abandoned after max_timeout
    retries: int = 0


class RunnerPool:
    """``num_runners`` threads executing workflows against shared models."""

    def __init__(
        self,
        model,
        *,
        num_runners: int,
        max_timeout: float,
        max_retry_times: int,
        env_vars: dict[str, str] | None = None,
        auxiliary_models: list | None = None,
        log_dir: Path | None = None,
        log_level: str = "INFO",
    ) -> None:
        self.model = model
        self.auxiliary_models = auxiliary_models or []
        self.max_timeout = max_timeout
        self.max_retry_times = max_retry_times
        for key, value in (env_vars or {}).items():
            os.environ[str(key)] = str(value)
        self.loggers = [
            get_actor_logger(f"explorer_runner_{i}", log_dir, level=log_level)
            for i in range(num_runners)
        ]
        self._ids = iter(range(num_runners))
        self._local = threading.local()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(num_runners, thread_name_prefix="runner", initializer=self._init_thread)

    def _init_thread(self) -> None:
        with self._lock:
            self._local.index = next(self._ids)

    @property
    def _logger(self) -> logging.Logger:
        return self.loggers[getattr(self._local, "index", 0)]

    def run_tasks(self, tasks: list[Task], batch_id: int | str) -> RunResult:
        """Run every task once (with retries); experiences come back in task order."""
        result = RunResult()
        futures: dict[Future, int] = {
            self._pool.submit(self._run_with_retries, task, batch_id): i for i, task in enumerate(tasks)
        }
        deadline = time.monotonic() + self.max_timeout
        per_task: dict[int, list[Experience]] = {}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=max(deadline - time.monotonic(), 0), return_when=FIRST_COMPLETED)
            for fut in done:
                exps, retries, ok = fut.result()
                result.retries += retries
                if ok:
                    per_task[futures[fut]] = exps
                else:
                    result.failed += 1
            if pending and time.monotonic() >= deadline:
                for fut in pending:
                    fut.cancel()
                    task = tasks[futures[fut]]
                    self.loggers[0].error(
                        "task %s of taskset '%s' timed out after %.0fs", task.index, task.taskset, self.max_timeout
                    )
                result.timed_out += len(pending)
                break
        for i in sorted(per_task):
            result.experiences.extend(per_task[i])
        return result

    def _run_with_retries(self, task: Task, batch_id: int | str) -> tuple[list[Experience], int, bool]:
        logger = self._logger
        attempts = self.max_retry_times + 1
        for attempt in range(attempts):
            try:
                workflow_cls = WORKFLOWS.get(task.workflow)
                workflow = workflow_cls(task, self.model, self.auxiliary_models, logger=logger)
                start = time.perf_counter()
                experiences = workflow.run()
                rewards = [e.reward for e in experiences]
                logger.info(
                    "task %s of '%s' done in %.2fs: %d experience(s), rewards %s",
                    task.index, task.taskset, time.perf_counter() - start, len(experiences), rewards,
                )
                for exp in experiences:
                    exp.eid = EID(batch=batch_id, task=task.index, run=exp.eid.run, step=exp.eid.step)
                    exp.info.setdefault("task_index", task.index)
                    exp.info.setdefault("taskset", task.taskset)
                return experiences, attempt, True
            except Exception:
                logger.error(
                    "task %s of taskset '%s' failed (try %d of %d):\n%s",
                    task.index, task.taskset, attempt + 1, attempts, traceback.format_exc(),
                )
        return [], attempts - 1, False

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
