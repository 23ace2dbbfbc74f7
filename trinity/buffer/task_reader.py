"""Batches of tasks from a taskset (``buffer.explorer_input.taskset`` / ``eval_tasksets``).

A taskset is a file or dataset directory (``storage_type: file``), a SQL table (``sql``)
or a directory with one task per sub-directory (``task_dir``, :mod:`trinity.buffer.task_dir`).

Past 400 lines on purpose: the stream of passes, each selector's order and the reader's
resumable state are one concern.

The reader turns the taskset into one stream of ``total_epochs`` passes (or, when
``total_steps`` is set, as many passes as ``total_steps`` batches need) and cuts it
into batches of ``batch_size`` tasks. Batches run across epoch boundaries, so nothing
is dropped and only the very last batch may be short.

Selectors decide the order inside each epoch:

- ``sequential``: rows in file order;
- ``shuffle``: a fresh permutation per epoch from ``numpy.random.default_rng([seed, epoch])``;
- ``random``: ``num_tasks`` draws with replacement per epoch, from the same generator;
- ``difficulty_based``: tasks whose estimated pass rate is near a target are drawn more
  often (:mod:`trinity.buffer.difficulty_selector`); ``data_selector.feature_keys`` name
  the columns of prior pass rates, ``data_selector.kwargs`` the settings. The explorer
  reports each step's observed pass rates (``feedback``), which move the estimates.
  Tasks are drawn a block of ``min(batch_size, num_tasks)`` at a time, distinct inside
  the block, from the estimates of the moment (in a mix of tasksets a block may serve
  more than one batch).

The first three orders are a pure function of (seed, epoch, position), so
``state_dict()`` only needs the position to resume at exactly the next batch;
``difficulty_based`` adds its estimates and the draws not read yet.

Several training tasksets (``buffer.explorer_input.tasksets``) are read by a
``TasksetMix``: one epoch of the mix is one epoch of every taskset, interleaved in
proportion to their sizes, so each batch holds tasks of each taskset about in the ratio
of their sizes (tasksets of 100 and 50 rows, batches of 3: two tasks from the first and
one from the second). Each taskset keeps its own selector. ``total_epochs`` counts
epochs of the mix (every task of every taskset once); ``total_steps`` cuts the mixed
stream after that many batches. A mix of one taskset reads what its reader reads.

Rows that lack the prompt key or hold the wrong type there, or cannot be parsed, stop
the reader with an error naming file, line and key; with ``skip_invalid_rows: true``
they are left out, counted in ``invalid.count`` and summarised in a warning. With
``enable_progress_bar: true`` a tqdm bar on stderr counts the rows as they are read.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from trinity.buffer.difficulty_selector import DifficultySelector, DifficultySettings
from trinity.buffer.errors import InvalidRows, MalformedRowError, MissingKeyError, TasksetExhausted
from trinity.buffer.file_reader import read_rows, with_progress
from trinity.buffer.row_check import format_rules, row_problem
from trinity.buffer.task_dir import task_dir_rows
from trinity.types import Task

logger = logging.getLogger(__name__)

SELECTORS = ("sequential", "shuffle", "random", "difficulty_based")


def as_dict(obj: Any) -> dict[str, Any]:
    """A plain dict of a config section (dataclass, mapping or ``None``)."""
    if obj is None:
        return {}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")}


def workflow_reads_prompt(name: str | None) -> bool:
    """Whether the registered workflow ``name`` builds its prompt from the format's prompt
    column (``Workflow.reads_prompt``); True for a name not registered, the strict side."""
    if not name:
        return True
    from trinity.utils.registry import UnknownNameError
    from trinity.workflows import WORKFLOWS

    try:
        return bool(getattr(WORKFLOWS.get(name), "reads_prompt", True))
    except UnknownNameError:
        return True


def stream_length(
    batch_size: int, total_epochs: int, total_steps: int | None, epoch_size: int
) -> int:
    """Tasks in the stream: ``total_steps`` batches when set, else ``total_epochs`` epochs."""
    return total_steps * batch_size if total_steps is not None else total_epochs * epoch_size


def next_batch(stream: TasksetReader | TasksetMix, what: str) -> list[Task]:
    """The next batch of ``stream`` (its tasks at ``position`` onwards), moving it on."""
    if stream.position >= stream.limit:
        raise TasksetExhausted(
            f"{what} exhausted after {len(stream)} batches ({stream.limit} tasks)"
        )
    end = min(stream.position + stream.batch_size, stream.limit)
    tasks = [stream.task_at(p) for p in range(stream.position, end)]
    stream.position = end
    return tasks


class TasksetReader:
    """Reads ``Task`` batches from a file, SQL or task_dir taskset, resumable by ``state_dict``."""

    def __init__(
        self,
        storage_cfg: Any,
        *,
        batch_size: int,
        total_epochs: int = 1,
        total_steps: int | None = None,
        seed: int = 42,
        selector: str = "sequential",
        default_workflow: str,
        default_reward_fn: str | None = None,
    ) -> None:
        if selector not in SELECTORS:
            raise ValueError(f"unknown task selector '{selector}' (valid: {', '.join(SELECTORS)})")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.cfg = storage_cfg
        self.name: str = getattr(storage_cfg, "name", "") or ""
        self.batch_size = batch_size
        self.seed = seed
        self.selector = selector
        self.format = as_dict(getattr(storage_cfg, "format", None))
        self.rollout_args = as_dict(getattr(storage_cfg, "rollout_args", None))
        self.workflow = getattr(storage_cfg, "default_workflow_type", None) or default_workflow
        self.reward_fn = getattr(storage_cfg, "default_reward_fn_type", None) or default_reward_fn
        self.skip_invalid = bool(getattr(storage_cfg, "skip_invalid_rows", False))
        self.progress = bool(getattr(storage_cfg, "enable_progress_bar", False))
        self.invalid = InvalidRows()  # rows left out under skip_invalid_rows
        self.rows = self._load_rows()
        if self.invalid.count:
            logger.warning("taskset '%s': %s", self.name, self.invalid.summary())
        if not self.rows:
            skipped = f" (skipped {self.invalid.count} invalid)" if self.invalid.count else ""
            raise ValueError(f"taskset '{self.name}' at '{storage_cfg.path}' has no rows{skipped}")
        self.limit = stream_length(batch_size, total_epochs, total_steps, len(self.rows))
        self.position = 0
        self._order_epoch = -1
        self._order = np.empty(0, dtype=np.int64)
        self.difficulty = self._difficulty_selector() if selector == "difficulty_based" else None
        self._drawn: dict[int, int] = {}  # position -> row, drawn by difficulty_based

    def _difficulty_selector(self) -> DifficultySelector:
        where = f"taskset '{self.name}' (data_selector, selector_type difficulty_based)"
        section = getattr(self.cfg, "data_selector", None)
        keys = list(getattr(section, "feature_keys", None) or [])
        if len(keys) not in (1, 2):
            raise ValueError(
                f"{where}: feature_keys must name one or two columns of prior pass rates "
                f"in [0, 1] (a weaker and a stronger reference model), got {keys}"
            )
        features = np.empty((len(self.rows), len(keys)))
        for i, row in enumerate(self.rows):
            for j, key in enumerate(keys):
                value = row.get(key)
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ValueError(
                        f"{where}: row {i} (0-based) holds {value!r} in feature key '{key}', "
                        "not a pass rate in [0, 1]"
                    )
                features[i, j] = value
        settings = DifficultySettings.from_kwargs(getattr(section, "kwargs", None), where)
        return DifficultySelector(features, settings, self.seed)

    def _load_rows(self) -> list[dict[str, Any]]:
        storage_type = getattr(self.cfg, "storage_type", "file")
        storage_type = getattr(storage_type, "value", storage_type)
        # the prompt column is checked only for workflows that read it
        rules = format_rules(self.format) if workflow_reads_prompt(self.workflow) else []
        invalid = self.invalid if self.skip_invalid else None
        if storage_type == "file":
            return read_rows(
                self.cfg.path,
                split=getattr(self.cfg, "split", None) or "train",
                subset_name=getattr(self.cfg, "subset_name", None),
                required_keys=rules,
                invalid=invalid,
                progress=self.progress,
            )
        if storage_type == "task_dir":
            if rules:
                raise ValueError(
                    f"taskset '{self.name}' (storage_type task_dir): workflow '{self.workflow}' "
                    "reads a prompt column, which task directories have none of; use a "
                    "workflow that reads the task's directory (the row's task_dir)"
                )
            return task_dir_rows(self.cfg.path, self.name)
        if storage_type == "sql":
            # here, not at module level: sqlalchemy loads only for SQL tasksets
            from trinity.buffer.sql_storage import CONNECT_TIMEOUT, LOCK_TIMEOUT, SQLTaskStorage

            storage = SQLTaskStorage(
                self.cfg.path,
                connect_timeout=getattr(self.cfg, "connect_timeout", CONNECT_TIMEOUT),
                lock_timeout=getattr(self.cfg, "lock_timeout", LOCK_TIMEOUT),
            )
            try:
                rows = storage.read_rows()
            finally:
                storage.close()
            kept = []
            # the name, not the URL, which may hold a password
            for i, row in enumerate(with_progress(rows, self.name or "sql", self.progress)):
                if not isinstance(row, Mapping):
                    found: tuple[str, bool] | None = (
                        f"expected a JSON object, got {type(row).__name__}",
                        False,
                    )
                else:
                    found = next(filter(None, (row_problem(row, rule) for rule in rules)), None)
                if found is None:
                    kept.append(row)
                    continue
                message, missing = found
                text = f"{self.cfg.path}, task row {i} (0-based): {message}"
                if invalid is None:
                    raise MissingKeyError(text) if missing else MalformedRowError(text)
                invalid.record(text)
            return kept
        raise ValueError(
            f"taskset '{self.name}': storage_type '{storage_type}' cannot hold a taskset; "
            "use 'file', 'sql' or 'task_dir'"
        )

    @property
    def num_tasks(self) -> int:
        return len(self.rows)

    @property
    def epoch(self) -> int:
        """The epoch the next task comes from (0-based)."""
        return self.position // len(self.rows)

    def __len__(self) -> int:
        """Number of batches in the whole stream (the last one may be short)."""
        return -(-self.limit // self.batch_size)

    def read_batch(self) -> list[Task]:
        """The next ``batch_size`` tasks; raises TasksetExhausted after the last batch."""
        return next_batch(self, f"taskset '{self.name}' is")

    def __iter__(self) -> Iterator[list[Task]]:
        while self.position < self.limit:
            yield self.read_batch()

    def read_all(self) -> list[Task]:
        """Every row once, in file order (for eval tasksets); does not move the position."""
        return [self._task(i) for i in range(len(self.rows))]

    def feedback(self, pass_rates: Mapping[int, float]) -> None:
        """Observed pass rates of rows of this taskset (row index -> [0, 1]) after a step;
        they update the ``difficulty_based`` estimates, other selectors ignore them."""
        if self.difficulty is not None and pass_rates:
            self.difficulty.update(list(pass_rates), list(pass_rates.values()))

    def selector_state(self) -> dict[str, Any] | None:
        """What ``difficulty_based`` learnt and drew ahead (None for the other selectors)."""
        if self.difficulty is None:
            return None
        return {
            **self.difficulty.state_dict(),
            "drawn": sorted([p, r] for p, r in self._drawn.items()),
        }

    def load_selector_state(self, state: Mapping[str, Any] | None) -> None:
        if self.difficulty is None:
            return
        if state is None or len(state.get("alphas", ())) != self.num_tasks:
            logger.warning(
                "taskset '%s': no difficulty_based estimates of its %d tasks were saved; "
                "they start afresh",
                self.name,
                self.num_tasks,
            )
            return
        self.difficulty.load_state_dict(state)
        self._drawn = {int(p): int(r) for p, r in state.get("drawn", [])}

    def state_dict(self) -> dict[str, Any]:
        state = {
            "position": self.position,
            "num_tasks": len(self.rows),
            "seed": self.seed,
            "selector": self.selector,
        }
        if self.difficulty is not None:
            state["difficulty"] = self.selector_state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key in ("num_tasks", "seed", "selector"):
            saved, now = state.get(key), getattr(self, key)
            if saved is not None and saved != now:
                # the stream after resuming differs from the one the run started with
                logger.warning(
                    "taskset '%s': %s was %s when the state was saved and is %s now; "
                    "resuming at position %s of a different task order",
                    self.name,
                    key,
                    saved,
                    now,
                    state["position"],
                )
        self.position = int(state["position"])
        self.load_selector_state(state.get("difficulty"))

    def task_at(self, position: int) -> Task:
        """The task at ``position`` of this taskset's stream (any position, any epoch)."""
        return self._task(self._row_index(position))

    def _row_index(self, position: int) -> int:
        n = len(self.rows)
        epoch, offset = divmod(position, n)
        if self.selector == "sequential":
            return offset
        if self.difficulty is not None:
            if position not in self._drawn:
                rows = self.difficulty.draw(min(self.batch_size, n))
                self._drawn = {position + i: int(row) for i, row in enumerate(rows)}
            return self._drawn[position]
        if epoch != self._order_epoch:
            rng = np.random.default_rng([self.seed % 2**64, epoch])
            if self.selector == "shuffle":
                self._order = rng.permutation(n)
            else:
                self._order = rng.integers(0, n, size=n)
            self._order_epoch = epoch
        return int(self._order[offset])

    def _task(self, index: int) -> Task:
        return Task(
            raw=dict(self.rows[index]),
            workflow=self.workflow,
            reward_fn=self.reward_fn,
            repeat_times=getattr(self.cfg, "repeat_times", None) or 1,
            taskset=self.name,
            index=index,
            is_eval=bool(getattr(self.cfg, "is_eval", False)),
            rollout_args=dict(self.rollout_args),
            format=dict(self.format),
            workflow_args=dict(getattr(self.cfg, "workflow_args", None) or {}),
            reward_fn_args=dict(getattr(self.cfg, "reward_fn_args", None) or {}),
        )


class TasksetMix:
    """Batches drawn from several tasksets, in proportion to their sizes.

    Slot ``s`` of an epoch of the mix (``N = sum(n_i)`` slots) holds the ``k``-th task of
    taskset ``i``, where the slots are sorted by ``(k + 0.5) / n_i`` (ties go to the
    taskset listed first): taskset ``i`` fills ``n_i / N`` of every stretch of slots.
    Its ``k``-th task of epoch ``e`` is position ``e * n_i + k`` of its own reader, so
    selectors shuffle and sample per taskset and per epoch as they do alone.
    """

    def __init__(
        self,
        readers: list[TasksetReader],
        *,
        batch_size: int,
        total_epochs: int = 1,
        total_steps: int | None = None,
    ) -> None:
        if not readers:
            raise ValueError("a taskset mix needs at least one taskset")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        names = [r.name for r in readers]
        if len(set(names)) != len(names):
            raise ValueError(f"taskset names must be unique, got {names}")
        self.readers = readers
        self.batch_size = batch_size
        sizes = [r.num_tasks for r in readers]
        keys = np.concatenate([(np.arange(n) + 0.5) / n for n in sizes])
        owners = np.concatenate([np.full(n, i) for i, n in enumerate(sizes)])
        offsets = np.concatenate([np.arange(n) for n in sizes])
        order = np.argsort(keys, kind="stable")
        self._owner, self._offset = owners[order], offsets[order]
        self.epoch_size = int(sum(sizes))
        self.limit = stream_length(batch_size, total_epochs, total_steps, self.epoch_size)
        self.position = 0

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.readers]

    @property
    def epoch(self) -> int:
        """The epoch of the mix the next task comes from (0-based)."""
        return self.position // self.epoch_size

    def __len__(self) -> int:
        """Number of batches in the whole stream (the last one may be short)."""
        return -(-self.limit // self.batch_size)

    def task_at(self, position: int) -> Task:
        epoch, slot = divmod(position, self.epoch_size)
        reader = self.readers[int(self._owner[slot])]
        return reader.task_at(epoch * reader.num_tasks + int(self._offset[slot]))

    def read_batch(self) -> list[Task]:
        """The next ``batch_size`` tasks; raises TasksetExhausted after the last batch."""
        return next_batch(self, f"tasksets {self.names} are")

    def _identity(self) -> list[dict[str, Any]]:
        """What decides the order of the stream, besides the position."""
        return [
            {"name": r.name, "num_tasks": r.num_tasks, "seed": r.seed, "selector": r.selector}
            for r in self.readers
        ]

    def feedback(self, pass_rates: Mapping[str, Mapping[int, float]]) -> None:
        """Observed pass rates after a step, by taskset name, then row index."""
        for reader in self.readers:
            reader.feedback(pass_rates.get(reader.name, {}))

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"position": self.position, "tasksets": self._identity()}
        selectors = {r.name: r.selector_state() for r in self.readers if r.difficulty}
        if selectors:
            state["selectors"] = selectors
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = state.get("tasksets")
        if saved is not None:
            now = self._identity()
            if list(saved) != now:
                # a different mix (tasksets, sizes, seeds or selectors) orders tasks differently
                logger.warning(
                    "the tasksets were %s when the state was saved and are %s now; "
                    "resuming at position %s of a different task order",
                    saved,
                    now,
                    state["position"],
                )
        self.position = int(state["position"])
        selectors = state.get("selectors") or {}
        for reader in self.readers:
            if reader.difficulty is not None:
                reader.load_selector_state(selectors.get(reader.name))
