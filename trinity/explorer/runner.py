"""Workflow runners: run tasks concurrently, retry failures, time out hung ones.

The pool has ``runner_per_model x engine_num`` runner slots; slot ``i`` calls rollout
engine ``i % engine_num`` and writes its own log file ``explorer_runner_<i>.log``. The
engines merge the concurrent requests of their runners into shared decode batches.

Every slot has wrappers of its own (:meth:`ModelWrapper.spawn` of the engine's wrapper,
and of each auxiliary model's), so with ``enable_history`` a workflow's history holds
its own calls only, including those it sent through its OpenAI client. The history is
cleared before every try and after the task, so nothing a failed try recorded reaches
the next try or task; a timed-out task keeps the wrappers it had (its thread may still
call them) and its slot gets new ones.

A task runs in a fresh thread on a free slot. If it raises, it is retried up to
``max_retry_times`` times; if it neither finishes nor fails within ``max_timeout``
seconds of starting (all tries included), it is counted as timed out and abandoned:
its slot gets a new thread for the next task at once, so a hung workflow never starves
the pool. Python cannot stop a thread, so the abandoned one runs on in the background;
whatever it returns goes to a queue nobody reads any more, and it cannot touch the
results of this or any later call. Failures never stop the step: they are counted,
logged with their traceback, and the step completes with the rest.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass
class _Wrappers:
    """A slot's own wrappers: the rollout model and each auxiliary model."""

    model: Any  # ModelWrapper
    auxiliary_models: list[Any]

    def clear_history(self) -> None:
        for wrapper in (self.model, *self.auxiliary_models):
            wrapper.clear_history()

    def close(self) -> None:
        """Leave the OpenAI servers: requests to these wrappers' paths then get 404."""
        for wrapper in (self.model, *self.auxiliary_models):
            wrapper.close()


@dataclass
class _Slot:
    """One runner: its own wrappers on the models it calls, and the log it writes."""

    index: int
    base: Any  # ModelWrapper of the slot's rollout engine; the slot's own are spawned
    auxiliary_bases: list[Any]  # one ModelWrapper per auxiliary model
    logger: logging.Logger
    wrappers: _Wrappers | None = None

    @property
    def model(self) -> Any:
        return self.wrappers.model

    def renew(self) -> None:
        """New wrappers for the next task; the old ones stay with whoever holds them."""
        if self.wrappers is not None:
            self.wrappers.close()
        self.wrappers = _Wrappers(self.base.spawn(), [aux.spawn() for aux in self.auxiliary_bases])


@dataclass
class _Outcome:
    experiences: list[Experience]
    retries: int
    ok: bool


class RunnerPool:
    """``num_runners`` concurrent workflow runners spread over ``models`` (one per engine).

    ``auxiliary_models``: one entry per auxiliary model, a ModelWrapper or a list of
    them (one per replica; slot ``i`` calls replica ``i % len``). Workflows get them, in
    this order, as ``auxiliary_models``.
    """

    def __init__(
        self,
        models: Sequence[Any],
        *,
        num_runners: int,
        max_timeout: float,
        max_retry_times: int,
        env_vars: dict[str, str] | None = None,
        auxiliary_models: Sequence[Any] | None = None,
        log_dir: Path | None = None,
        log_level: str = "INFO",
    ) -> None:
        if not models:
            raise ValueError("RunnerPool needs at least one model")
        if num_runners < 1:
            raise ValueError(f"num_runners must be >= 1, got {num_runners}")
        if max_timeout <= 0:
            raise ValueError(f"explorer.max_timeout must be > 0 seconds, got {max_timeout}")
        if max_retry_times < 0:
            raise ValueError(f"explorer.max_retry_times must be >= 0, got {max_retry_times}")
        self.auxiliary_models = [
            list(m) if isinstance(m, (list, tuple)) else [m] for m in auxiliary_models or []
        ]
        self.max_timeout = max_timeout
        self.max_retry_times = max_retry_times
        # runners are threads of this process: the variables reach every workflow
        for key, value in (env_vars or {}).items():
            os.environ[str(key)] = str(value)
        self.slots = [
            _Slot(
                i,
                models[i % len(models)],
                [replicas[i % len(replicas)] for replicas in self.auxiliary_models],
                get_actor_logger(f"explorer_runner_{i}", log_dir, level=log_level),
            )
            for i in range(num_runners)
        ]
        for slot in self.slots:
            slot.renew()
        self.loggers = [slot.logger for slot in self.slots]
        self._abandoned: list[threading.Thread] = []
        self._closed = False

    @property
    def abandoned_running(self) -> int:
        """Threads of timed-out tasks that have not finished yet."""
        self._abandoned = [t for t in self._abandoned if t.is_alive()]
        return len(self._abandoned)

    def run_tasks(self, tasks: list[Task], batch_id: int | str) -> RunResult:
        """Run every task once (with retries); experiences come back in task order."""
        if self._closed:
            raise RuntimeError("the runner pool is closed")
        result = RunResult()
        finished: queue.Queue[tuple[int, _Outcome]] = queue.Queue()  # this call's only
        todo = deque(enumerate(tasks))
        free = deque(self.slots)
        running: dict[int, tuple[_Slot, int, float, threading.Thread]] = {}
        per_task: dict[int, list[Experience]] = {}
        tokens = itertools.count()
        while todo or running:
            while todo and free:
                slot, (position, task) = free.popleft(), todo.popleft()
                token = next(tokens)
                thread = threading.Thread(
                    target=self._work,
                    # the thread keeps these wrappers even if the slot is renewed
                    args=(slot.logger, slot.wrappers, task, batch_id, token, finished),
                    name=f"runner-{slot.index}",
                    daemon=True,
                )
                running[token] = (slot, position, time.monotonic() + self.max_timeout, thread)
                thread.start()
            next_deadline = min(deadline for _, _, deadline, _ in running.values())
            try:
                token, outcome = finished.get(timeout=max(next_deadline - time.monotonic(), 0))
            except queue.Empty:
                self._expire(running, tasks, free, result)
                continue
            slot, position, _, _ = running.pop(token)
            free.append(slot)
            result.retries += outcome.retries
            if outcome.ok:
                per_task[position] = outcome.experiences
            else:
                result.failed += 1
        for position in sorted(per_task):
            result.experiences.extend(per_task[position])
        return result

    def _expire(
        self,
        running: dict[int, tuple[_Slot, int, float, threading.Thread]],
        tasks: list[Task],
        free: deque[_Slot],
        result: RunResult,
    ) -> None:
        """Abandon the tasks past their deadline and give their slots back."""
        now = time.monotonic()
        for token, (slot, position, deadline, thread) in list(running.items()):
            if deadline > now:
                continue
            del running[token]
            task = tasks[position]
            slot.logger.error(
                "task %s of taskset '%s' timed out after %.0fs (explorer.max_timeout); abandoned",
                task.index,
                task.taskset,
                self.max_timeout,
            )
            result.timed_out += 1
            self._abandoned.append(thread)
            slot.renew()
            free.append(slot)
        if self.abandoned_running:
            self.slots[0].logger.warning(
                "%d abandoned workflow thread(s) still running in the background",
                self.abandoned_running,
            )

    def _work(
        self,
        logger: logging.Logger,
        wrappers: _Wrappers,
        task: Task,
        batch_id: int | str,
        token: int,
        finished: queue.Queue,
    ) -> None:
        outcome = self._run_with_retries(logger, wrappers, task, batch_id)
        wrappers.clear_history()  # what the workflow did not extract
        finished.put((token, outcome))

    def _run_with_retries(
        self, logger: logging.Logger, wrappers: _Wrappers, task: Task, batch_id: int | str
    ) -> _Outcome:
        attempts = self.max_retry_times + 1
        for attempt in range(attempts):
            wrappers.clear_history()  # a failed try's calls are not this try's
            try:
                workflow_cls = WORKFLOWS.get(task.workflow)
                workflow = workflow_cls(
                    task, wrappers.model, wrappers.auxiliary_models, logger=logger
                )
                start = time.perf_counter()
                experiences = workflow.run()
                rewards = [e.reward for e in experiences]
                logger.info(
                    "task %s of '%s' done in %.2fs: %d experience(s), rewards %s",
                    task.index,
                    task.taskset,
                    time.perf_counter() - start,
                    len(experiences),
                    rewards,
                )
                for exp in experiences:
                    exp.eid = EID(
                        batch=batch_id, task=task.index, run=exp.eid.run, step=exp.eid.step
                    )
                    exp.info.setdefault("task_index", task.index)
                    exp.info.setdefault("taskset", task.taskset)
                return _Outcome(experiences, attempt, True)
            except Exception:
                logger.error(
                    "task %s of taskset '%s' failed (try %d of %d):\n%s",
                    task.index,
                    task.taskset,
                    attempt + 1,
                    attempts,
                    traceback.format_exc(),
                )
        return _Outcome([], attempts - 1, False)

    def close(self) -> None:
        """Stop accepting work; abandoned threads are daemons and die with the process."""
        self._closed = True
        for slot in self.slots:
            slot.wrappers.close()
