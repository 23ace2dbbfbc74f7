"""Task operators over taskset rows (dicts).

- ``value_filter``: keep rows whose ``key`` is in ``keep_values`` / not in
  ``drop_values`` / within ``[min_value, max_value]`` (all conditions that are set
  must hold); rows without ``key`` are dropped unless ``keep_missing``;
- ``dedupe``: keep the first row of each distinct value of ``keys`` (all keys when
  unset); values are compared by their JSON text, so lists and dicts work too.
"""

from __future__ import annotations

import json
import math
from typing import Any

from trinity.pipeline.operator import TASK_OPERATORS, OperatorError, RowTaskOperator, TaskOperator


@TASK_OPERATORS.register("value_filter")
class ValueFilter(RowTaskOperator):
    def __init__(
        self,
        key: str,
        keep_values: list[Any] | None = None,
        drop_values: list[Any] | None = None,
        min_value: float | None = None,
        max_value: float | None = None,
        keep_missing: bool = False,
    ) -> None:
        if keep_values is None and drop_values is None and min_value is None and max_value is None:
            raise OperatorError(
                f"value_filter on '{key}' needs keep_values, drop_values, min_value or max_value"
            )
        self.key = key
        self.keep_values = keep_values
        self.drop_values = drop_values
        self.min_value = -math.inf if min_value is None else min_value
        self.max_value = math.inf if max_value is None else max_value
        self.ranged = min_value is not None or max_value is not None
        self.keep_missing = keep_missing

    def process_row(self, row: dict[str, Any]) -> dict[str, Any] | None:
        return row if self._keep(row) else None

    def _keep(self, row: dict[str, Any]) -> bool:
        if self.key not in row:
            return self.keep_missing
        value = row[self.key]
        if self.keep_values is not None and value not in self.keep_values:
            return False
        if self.drop_values is not None and value in self.drop_values:
            return False
        if self.ranged:
            try:
                number = float(value)
            except (TypeError, ValueError):
                return False  # not a number: outside any range
            return self.min_value <= number <= self.max_value
        return True


@TASK_OPERATORS.register("dedupe")
class Dedupe(TaskOperator):
    def __init__(self, keys: list[str] | None = None) -> None:
        self.keys = keys

    def process(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen: set[str] = set()
        out = []
        for row in rows:
            keys = self.keys if self.keys is not None else sorted(row)
            identity = json.dumps([row.get(k) for k in keys], sort_keys=True, default=str)
            if identity not in seen:
                seen.add(identity)
                out.append(row)
        return out
