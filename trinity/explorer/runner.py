"""Workflow runners: run tasks concurrently, retry failures, time out hung ones.

Past 400 lines on purpose: the pool's state (free slots, running parts, retries, time-outs,
over-rollout cuts) is one structure that every path of ``run_tasks`` changes in one loop.

The pool has ``runner_per_model x engine_num`` runner slots; slot ``i`` calls rollout
engine ``i % engine_num`` and writes its own log file ``explorer_runner_<i>.log``. The
engines merge the concurrent requests of their runners into shared decode batches.

Every slot has wrappers of its own (:meth:`ModelWrapper.spawn` of the engine's wrapper,
and of each auxiliary model's), so with ``enable_history`` a workflow's history holds
its own calls only, including those it sent through its OpenAI client. The history is
cleared before every try and after the task, so nothing a failed try recorded reaches
the next try or task.

A task runs in a fresh thread on a free slot. If it raises, it is retried up to
``max_retry_times`` times; if it neither finishes nor fails within ``max_timeout``
seconds of starting (all tries included), it is counted as timed out and abandoned.
Python cannot stop a thread, so the abandoned one runs on in the background, but:

- its wrappers are closed: any later model call from it (chat, generate, logprobs)
  raises :class:`~trinity.rollout.wrapper.ModelClosedError` before reaching the engine,
  and its OpenAI client gets 404 ``scope_not_found``; the refused calls are counted;
- it starts no further try, and whatever it returns goes nowhere;
- the slot gets new wrappers and a new thread for the next task at once, unless more
  than ``max_abandoned`` abandoned threads are alive: then the slot rests until they
  are down to ``max_abandoned`` again, so a pool never runs more than
  ``num_runners + max_abandoned`` workflow threads. When every slot rests, the tasks
  not yet started are skipped (counted and logged) rather than waited for.

With ``max_repeat_times_per_runner`` a task of ``repeat_times`` n runs as parts of at
most that many runs on separate slots (n=8, max 3: parts of 3, 3, 2 runs); part ``p``
numbers its runs from the runs of the parts before it, so the experiences of the parts
are one advantage group, in task order. A part that fails or times out counts alone.

Failures never stop the step: they are counted, logged with their traceback, and the
step completes with the rest.

With an :class:`OverRollout` rule (``explorer.over_rollout``) a call does not wait for
its slowest tasks: once ``enough`` of them have ended it waits at most ``wait_s``
seconds more, then cuts the rest. Their running parts are abandoned as timed-out ones
are (wrappers closed, threads left to end), their parts not started are dropped, and
the experiences of their finished parts are kept only with ``keep_partial``.
"""

from __future__ import annotations

import dataclasses
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
    skipped: int = 0  # tasks not started: every slot rested (too many abandoned threads)
    cut: int = 0  # tasks given up unfinished by over-rollout
    partial: int = 0  # cut tasks whose finished runs were kept (over-rollout keep_partial)
    retries: int = 0
    abandoned_alive: int = 0  # threads of abandoned tasks still running at the end
    refused_calls: int = 0  # model calls of abandoned tasks refused during this call


@dataclass
class _Wrappers:
    """A slot's own wrappers: the rollout model and each auxiliary model."""

    model: Any  # ModelWrapper
    auxiliary_models: list[Any]

    def clear_history(self) -> None:
        for wrapper in (self.model, *self.auxiliary_models):
            wrapper.clear_history()

    def close(self) -> None:
        """Refuse later calls; leave the OpenAI servers (these paths then get 404)."""
        for wrapper in (self.model, *self.auxiliary_models):
            wrapper.close()

    @property
    def refused_calls(self) -> int:
        return sum(w.refused_calls for w in (self.model, *self.auxiliary_models))


@dataclass(eq=False)
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
        """New wrappers for the next task; the old ones are closed (their holder's calls
        are refused)."""
        if self.wrappers is not None:
            self.wrappers.close()
        self.wrappers = _Wrappers(self.base.spawn(), [aux.spawn() for aux in self.auxiliary_bases])


@dataclass
class _Outcome:
    experiences: list[Experience]
    retries: int
    ok: bool


@dataclass
class _Running:
    slot: _Slot
    position: int  # of the task in run_tasks' list
    deadline: float  # time.monotonic()
    thread: threading.Thread
    wrappers: _Wrappers
    abandoned: threading.Event  # set at the deadline: the thread starts no further try


@dataclass(eq=False)
class _Abandoned:
    thread: threading.Thread
    wrappers: _Wrappers  # closed


_REST_POLL_S = 0.1  # how often a call with resting slots checks for ended threads


@dataclass
class OverRollout:
    """When a call gives up its slowest tasks (Trinity-RFT's ``explorer.over_rollout``).

    Once ``enough`` tasks have ended (finished, failed or timed out; a task split by
    ``max_repeat_times_per_runner`` ends with its last part), the call waits at most
    ``wait_s`` seconds more for the others, then cuts the ones still unfinished.
    ``keep_partial``: a cut task's finished parts keep their experiences.
    """

    enough: int
    wait_s: float
    keep_partial: bool = False

    def __post_init__(self) -> None:
        if self.enough < 0 or self.wait_s < 0:
            raise ValueError(
                f"over-rollout needs enough >= 0 and wait_s >= 0, got {self.enough}, {self.wait_s}"
            )


@dataclass
class _Progress:
    """Which tasks of a call have ended, and when its over-rollout cutoff falls."""

    owners: list[int]  # task position of each part
    rule: OverRollout | None
    open_parts: dict[int, int] = field(default_factory=dict)  # task position -> parts left
    ended: int = 0
    cutoff: float | None = None  # time.monotonic() at which unfinished tasks are cut

    def __post_init__(self) -> None:
        for owner in self.owners:
            self.open_parts[owner] = self.open_parts.get(owner, 0) + 1
        self._start_countdown()

    def part_ended(self, position: int) -> None:
        owner = self.owners[position]
        self.open_parts[owner] -= 1
        if self.open_parts[owner] == 0:
            self.ended += 1
            self._start_countdown()

    def _start_countdown(self) -> None:
        if self.rule is not None and self.cutoff is None and self.ended >= self.rule.enough:
            self.cutoff = time.monotonic() + self.rule.wait_s

    def seconds_left(self) -> float:
        return float("inf") if self.cutoff is None else self.cutoff - time.monotonic()


def split_repeats(tasks: Sequence[Task], most: int | None) -> list[tuple[Task, int]]:
    """``(part, run offset)`` of each task: ``repeat_times`` cut into parts of <= ``most``."""
    return [(part, offset) for _, part, offset in _parts(tasks, most)]


def _parts(tasks: Sequence[Task], most: int | None) -> list[tuple[int, Task, int]]:
    """``(task position, part, run offset)`` of the parts of ``tasks``, in task order."""
    if most is None:
        return [(i, task, 0) for i, task in enumerate(tasks)]
    parts = []
    for i, task in enumerate(tasks):
        for offset in range(0, max(task.repeat_times, 1), most):
            runs = min(most, task.repeat_times - offset) if task.repeat_times > 0 else 1
            part = (
                task if runs == task.repeat_times else dataclasses.replace(task, repeat_times=runs)
            )
            parts.append((i, part, offset))
    return parts


class RunnerPool:
    """``num_runners`` concurrent workflow runners spread over ``models`` (one per engine).

    ``auxiliary_models``: one entry per auxiliary model, a ModelWrapper or a list of
    them (one per replica; slot ``i`` calls replica ``i % len``). Workflows get them, in
    this order, as ``auxiliary_models``. ``max_abandoned`` (default ``num_runners``):
    abandoned threads the pool tolerates while every slot keeps working. ``first_index``
    numbers the slots (and their log files) of a second pool beside the first.
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
        max_abandoned: int | None = None,
        max_repeat_times_per_runner: int | None = None,
        first_index: int = 0,
    ) -> None:
        if not models:
            raise ValueError("RunnerPool needs at least one model")
        if num_runners < 1:
            raise ValueError(f"num_runners must be >= 1, got {num_runners}")
        if max_timeout <= 0:
            raise ValueError(f"explorer.max_timeout must be > 0 seconds, got {max_timeout}")
        if max_retry_times < 0:
            raise ValueError(f"explorer.max_retry_times must be >= 0, got {max_retry_times}")
        if max_abandoned is not None and max_abandoned < 0:
            raise ValueError(f"max_abandoned must be >= 0, got {max_abandoned}")
        if max_repeat_times_per_runner is not None and max_repeat_times_per_runner < 1:
            raise ValueError(
                "explorer.max_repeat_times_per_runner must be >= 1, got "
                f"{max_repeat_times_per_runner}"
            )
        self.max_repeat_times_per_runner = max_repeat_times_per_runner
        self.max_abandoned = num_runners if max_abandoned is None else max_abandoned
        self.auxiliary_models = [
            list(m) if isinstance(m, (list, tuple)) else [m] for m in auxiliary_models or []
        ]
        self.max_timeout = max_timeout
        self.max_retry_times = max_retry_times
        # runners are threads of this process: workflows see explorer.env_vars when the
        # launcher started the process with them (launch/process_policy.py); the pool
        # itself leaves os.environ alone and names the ones missing
        missing = sorted(
            str(k) for k, v in (env_vars or {}).items() if os.environ.get(str(k)) != str(v)
        )
        if missing:
            logging.getLogger(__name__).warning(
                "explorer.env_vars %s are not in this process's environment", missing
            )
        self.slots = [
            _Slot(
                first_index + i,
                models[i % len(models)],
                [replicas[i % len(replicas)] for replicas in self.auxiliary_models],
                get_actor_logger(f"explorer_runner_{first_index + i}", log_dir, level=log_level),
            )
            for i in range(num_runners)
        ]
        for slot in self.slots:
            slot.renew()
        self.loggers = [slot.logger for slot in self.slots]
        self._abandoned: list[_Abandoned] = []
        self._refused_by_ended = 0  # refused calls of abandoned threads that have ended
        self._resting: list[_Slot] = []  # slots waiting for abandoned threads to end
        self._closed = False

    @property
    def abandoned_running(self) -> int:
        """Threads of timed-out tasks that have not finished yet."""
        self._forget_ended()
        return len(self._abandoned)

    @property
    def refused_calls(self) -> int:
        """Model calls refused so far because their task had been abandoned."""
        self._forget_ended()
        return self._refused_by_ended + sum(r.wrappers.refused_calls for r in self._abandoned)

    def _forget_ended(self) -> None:
        """Drop the abandoned threads that have ended, keeping their refused calls' count."""
        for record in [r for r in self._abandoned if not r.thread.is_alive()]:
            self._refused_by_ended += record.wrappers.refused_calls
            self._abandoned.remove(record)

    def run_tasks(
        self, tasks: list[Task], batch_id: int | str, over_rollout: OverRollout | None = None
    ) -> RunResult:
        """Run every task once (with retries); experiences come back in task order.

        With ``over_rollout`` the call ends early, cutting its slowest tasks.
        """
        if self._closed:
            raise RuntimeError("the runner pool is closed")
        result = RunResult()
        refused_before = self.refused_calls
        finished: queue.Queue[tuple[int, _Outcome]] = queue.Queue()  # this call's only
        parts = _parts(tasks, self.max_repeat_times_per_runner)
        progress = _Progress([owner for owner, _, _ in parts], over_rollout)
        tasks = [part for _, part, _ in parts]
        todo = deque(enumerate(tasks))
        free = deque(s for s in self.slots if s not in self._resting)
        running: dict[int, _Running] = {}
        per_task: dict[int, list[Experience]] = {}
        tokens = itertools.count()
        while todo or running:
            if progress.seconds_left() <= 0:
                assert over_rollout is not None
                self._cut(todo, running, tasks, progress, per_task, result, over_rollout)
                break
            self._wake_resting(free)
            while todo and free:
                slot, (position, task) = free.popleft(), todo.popleft()
                token = next(tokens)
                abandoned = threading.Event()
                thread = threading.Thread(
                    target=self._work,
                    # the thread keeps these wrappers even if the slot is renewed
                    args=(
                        slot.logger,
                        slot.wrappers,
                        task,
                        parts[position][2],
                        batch_id,
                        token,
                        finished,
                        abandoned,
                    ),
                    name=f"runner-{slot.index}",
                    daemon=True,
                )
                deadline = time.monotonic() + self.max_timeout
                running[token] = _Running(
                    slot, position, deadline, thread, slot.wrappers, abandoned
                )
                thread.start()
            if not running:  # every slot rests and nothing can end this wait: give up
                self._skip(todo, tasks, result)
                break
            wait = min(r.deadline for r in running.values()) - time.monotonic()
            wait = min(wait, progress.seconds_left())
            if todo and self._resting:
                wait = min(wait, _REST_POLL_S)
            try:
                token, outcome = finished.get(timeout=max(wait, 0))
            except queue.Empty:
                for position in self._expire(running, tasks, free, result):
                    progress.part_ended(position)
                continue
            done = running.pop(token, None)
            if done is None:  # an abandoned task's thread ended; its outcome is void
                continue
            free.append(done.slot)
            progress.part_ended(done.position)
            result.retries += outcome.retries
            if outcome.ok:
                per_task[done.position] = outcome.experiences
            else:
                result.failed += 1
        for position in sorted(per_task):
            result.experiences.extend(per_task[position])
        result.abandoned_alive = self.abandoned_running
        result.refused_calls = self.refused_calls - refused_before
        return result

    def _expire(
        self,
        running: dict[int, _Running],
        tasks: list[Task],
        free: deque[_Slot],
        result: RunResult,
    ) -> list[int]:
        """Abandon the tasks past their deadline; returns their positions."""
        now = time.monotonic()
        expired = []
        for token, entry in list(running.items()):
            if entry.deadline > now:
                continue
            del running[token]
            task = tasks[entry.position]
            entry.slot.logger.error(
                "task %s of taskset '%s' timed out after %.0fs (explorer.max_timeout); "
                "abandoned, its model calls are refused from now on",
                task.index,
                task.taskset,
                self.max_timeout,
            )
            result.timed_out += 1
            self._abandon(entry, free)
            expired.append(entry.position)
        if self.abandoned_running:
            self.slots[0].logger.warning(
                "%d abandoned workflow thread(s) still running in the background",
                self.abandoned_running,
            )
        return expired

    def _abandon(self, entry: _Running, free: deque[_Slot]) -> None:
        """Close a running task's wrappers and let its thread go; free or rest its slot."""
        entry.abandoned.set()
        entry.wrappers.close()
        self._abandoned.append(_Abandoned(entry.thread, entry.wrappers))
        slot = entry.slot
        if self.abandoned_running > self.max_abandoned:
            self._resting.append(slot)
            slot.logger.error(
                "%d abandoned workflow threads are alive, more than max_abandoned=%d: "
                "runner slot %d rests until they are down to %d",
                self.abandoned_running,
                self.max_abandoned,
                slot.index,
                self.max_abandoned,
            )
        else:
            slot.renew()
            free.append(slot)

    def _cut(
        self,
        todo: deque[tuple[int, Task]],
        running: dict[int, _Running],
        tasks: list[Task],
        progress: _Progress,
        per_task: dict[int, list[Experience]],
        result: RunResult,
        rule: OverRollout,
    ) -> None:
        """Over-rollout: give up the tasks not ended; their running parts are abandoned,
        the parts not started dropped, and the finished ones kept only with keep_partial."""
        cut = {progress.owners[p] for p, _ in todo}
        cut |= {progress.owners[entry.position] for entry in running.values()}
        todo.clear()
        for entry in running.values():
            self._abandon(entry, deque())
        running.clear()
        finished_parts = [p for p in per_task if progress.owners[p] in cut]
        if rule.keep_partial:
            result.partial = len({progress.owners[p] for p in finished_parts})
        else:
            for position in finished_parts:
                del per_task[position]
        result.cut = len(cut)
        self.slots[0].logger.warning(
            "%d task(s) cut (first: task %s of taskset '%s'): %d of %d had ended %.0fs "
            "before (explorer.over_rollout); finished runs of %d cut task(s) kept",
            len(cut),
            tasks[progress.owners.index(min(cut))].index,
            tasks[progress.owners.index(min(cut))].taskset,
            progress.ended,
            len(progress.open_parts),
            rule.wait_s,
            result.partial,
        )

    def _wake_resting(self, free: deque[_Slot]) -> None:
        """Give the resting slots new wrappers once few enough abandoned threads are alive."""
        if not self._resting or self.abandoned_running > self.max_abandoned:
            return
        for slot in self._resting:
            slot.logger.info("runner slot %d works again", slot.index)
            slot.renew()
            free.append(slot)
        self._resting.clear()

    def _skip(self, todo: deque[tuple[int, Task]], tasks: list[Task], result: RunResult) -> None:
        """Count and log the tasks no slot can take (every slot rests)."""
        result.skipped += len(todo)
        self.slots[0].logger.error(
            "%d task(s) of this call skipped (first: task %s of taskset '%s'): every runner "
            "slot rests while %d abandoned workflow threads are alive (max_abandoned=%d)",
            len(todo),
            todo[0][1].index,
            todo[0][1].taskset,
            self.abandoned_running,
            self.max_abandoned,
        )
        todo.clear()

    def _work(
        self,
        logger: logging.Logger,
        wrappers: _Wrappers,
        task: Task,
        run_offset: int,
        batch_id: int | str,
        token: int,
        finished: queue.Queue,
        abandoned: threading.Event,
    ) -> None:
        outcome = self._run_with_retries(logger, wrappers, task, run_offset, batch_id, abandoned)
        wrappers.clear_history()  # what the workflow did not extract
        finished.put((token, outcome))

    def _run_with_retries(
        self,
        logger: logging.Logger,
        wrappers: _Wrappers,
        task: Task,
        run_offset: int,
        batch_id: int | str,
        abandoned: threading.Event,
    ) -> _Outcome:
        attempts = self.max_retry_times + 1
        for attempt in range(attempts):
            if abandoned.is_set():
                break
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
                    # a workflow may split its task into advantage groups of its own
                    # ("<index>-<name>", math_trainable_ruler_workflow's judgements)
                    sub = exp.eid.task
                    own = isinstance(sub, str) and sub.startswith(f"{task.index}-")
                    exp.eid = EID(
                        batch=batch_id,
                        task=sub if own else task.index,
                        run=exp.eid.run + run_offset,
                        step=exp.eid.step,
                    )
                    exp.info.setdefault("task_index", task.index)
                    exp.info.setdefault("taskset", task.taskset)
                return _Outcome(experiences, attempt, True)
            except Exception as exc:
                if abandoned.is_set():
                    logger.warning(
                        "abandoned task %s of taskset '%s' ended with %s: %s",
                        task.index,
                        task.taskset,
                        type(exc).__name__,
                        exc,
                    )
                    break
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
