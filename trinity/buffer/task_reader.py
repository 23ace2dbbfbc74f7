"""Batches of tasks from a taskset (``buffer.explorer_input.taskset`` / ``eval_tasksets``).

The reader turns the taskset into one stream of ``total_epochs`` passes (or, when
``total_steps`` is set, as many passes as ``total_steps`` batches need) and cuts it
into batches of ``batch_size`` tasks. Batches run across epoch boundaries, so nothing
is dropped and only the very last batch may be short.

Selectors decide the order inside each epoch:

- ``sequential``: rows in file order;
- ``shuffle``: a fresh permutation per epoch from ``numpy.random.default_rng([seed, epoch])``;
- ``random``: ``num_tasks`` draws with replacement per epoch, from the same generator.

The order is a pure function of (seed, epoch, position), so ``state_dict()`` only
needs the position to resume at exactly the next batch.

Rows that lack the prompt key or hold the wrong type there, or cannot be parsed, stop
the reader with an error naming file, line and key; with ``skip_invalid_rows: true``
they are left out, counted in ``invalid.count`` and summarised in a warning.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from trinity.buffer.errors import InvalidRows, MalformedRowError, MissingKeyError, TasksetExhausted
from trinity.buffer.file_reader import read_rows
from trinity.buffer.row_check import format_rules, row_problem
from trinity.buffer.sql_storage import SQLTaskStorage
from trinity.types import Task

logger = logging.getLogger(__name__)

SELECTORS = ("sequential", "shuffle", "random")


def as_dict(obj: Any) -> dict[str, Any]:
    """A plain dict of a config section (dataclass, mapping or ``None``)."""
    if obj is None:
        return {}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")}


class TasksetReader:
    """Reads ``Task`` batches from a file or SQL taskset, resumable by ``state_dict``."""

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
        self.invalid = InvalidRows()  # rows left out under skip_invalid_rows
        self.rows = self._load_rows()
        if self.invalid.count:
            logger.warning("taskset '%s': %s", self.name, self.invalid.summary())
        if not self.rows:
            skipped = f" (skipped {self.invalid.count} invalid)" if self.invalid.count else ""
            raise ValueError(f"taskset '{self.name}' at '{storage_cfg.path}' has no rows{skipped}")
        # a stream of positions; total_steps, when set, overrides total_epochs
        if total_steps is not None:
            self.limit = total_steps * batch_size
        else:
            self.limit = total_epochs * len(self.rows)
        self.position = 0
        self._order_epoch = -1
        self._order = np.empty(0, dtype=np.int64)

    def _load_rows(self) -> list[dict[str, Any]]:
        storage_type = getattr(self.cfg, "storage_type", "file")
        storage_type = getattr(storage_type, "value", storage_type)
        rules = format_rules(self.format)
        invalid = self.invalid if self.skip_invalid else None
        if storage_type == "file":
            return read_rows(
                self.cfg.path,
                split=getattr(self.cfg, "split", None) or "train",
                subset_name=getattr(self.cfg, "subset_name", None),
                required_keys=rules,
                invalid=invalid,
            )
        if storage_type == "sql":
            storage = SQLTaskStorage(self.cfg.path)
            try:
                rows = storage.read_rows()
            finally:
                storage.close()
            kept = []
            for i, row in enumerate(rows):
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
            "use 'file' or 'sql'"
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
        if self.position >= self.limit:
            raise TasksetExhausted(
                f"taskset '{self.name}' is exhausted after {len(self)} batches ({self.limit} tasks)"
            )
        end = min(self.position + self.batch_size, self.limit)
        tasks = [self._task(self._row_index(p)) for p in range(self.position, end)]
        self.position = end
        return tasks

    def __iter__(self) -> Iterator[list[Task]]:
        while self.position < self.limit:
            yield self.read_batch()

    def read_all(self) -> list[Task]:
        """Every row once, in file order (for eval tasksets); does not move the position."""
        return [self._task(i) for i in range(len(self.rows))]

    def state_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "num_tasks": len(self.rows),
            "seed": self.seed,
            "selector": self.selector,
        }

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

    def _row_index(self, position: int) -> int:
        n = len(self.rows)
        epoch, offset = divmod(position, n)
        if self.selector == "sequential":
            return offset
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
        )
