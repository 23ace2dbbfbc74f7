"""The operator interface of the data pipelines (``data_processor``).

An experience operator takes a batch of experiences and returns the ones to keep
(possibly changed) plus metrics; a task operator takes taskset rows and returns rows.
Both are registered by the name the config uses::

    data_processor:
      experience_pipeline:
        operators:
          - name: reward_shaping_mapper
            args: {reward_shaping_configs: [{stats_key: quality, op_type: ADD, weight: 0.5}]}

``args`` become the operator's constructor keywords; a dotted import path works as a
name for user operators (``my_pkg.ops.MyFilter``).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, TypeVar

from trinity.types import Experience
from trinity.utils.registry import Registry


class OperatorError(ValueError):
    """An operator is misconfigured or cannot process its input."""


class ExperienceOperator(ABC):
    """Processes one batch of experiences (usually one explore step's)."""

    @abstractmethod
    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        """The experiences to keep, and metrics named ``<operator>/<what>``."""


class TaskOperator(ABC):
    """Processes taskset rows (dicts as read from the dataset)."""

    @abstractmethod
    def process(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows to keep, possibly changed."""


class RowTaskOperator(TaskOperator):
    """A task operator that looks at one row at a time (a map or a filter): the task
    pipeline may split the rows over ``num_process`` worker processes. Subclasses must
    pickle (module-level classes with plain attributes do)."""

    @abstractmethod
    def process_row(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """The row to keep, possibly changed; None drops it."""

    def process(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [out for row in rows if (out := self.process_row(row)) is not None]


EXPERIENCE_OPERATORS: Registry[type[ExperienceOperator]] = Registry("experience operator")
TASK_OPERATORS: Registry[type[TaskOperator]] = Registry("task operator")

Op = TypeVar("Op")


def operator_spec(cfg: Any) -> tuple[str, dict[str, Any]]:
    """``(name, args)`` of an ``OperatorConfig`` or a ``{name, args}`` mapping."""
    if isinstance(cfg, Mapping):
        name, args = cfg.get("name"), cfg.get("args")
    else:
        name, args = getattr(cfg, "name", None), getattr(cfg, "args", None)
    if not name:
        raise OperatorError(f"operator config {cfg!r} has no name")
    return str(name), dict(args or {})


def build_operator(registry: Registry[type[Op]], cfg: Any) -> Op:
    """Instantiate the operator ``cfg`` names with its ``args``."""
    name, args = operator_spec(cfg)
    cls = registry.get(name)
    try:
        inspect.signature(cls).bind(**args)
    except TypeError as exc:
        raise OperatorError(
            f"{registry.kind} '{name}': bad args {sorted(args)} ({exc}); "
            f"it takes {inspect.signature(cls)}"
        ) from None
    return cls(**args)
