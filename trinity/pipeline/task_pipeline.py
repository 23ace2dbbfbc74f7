"""``data_processor.task_pipeline``: turn raw task files into the training taskset.

    rows, metrics = TaskPipeline(cfg.operators).process(rows)
    path = run_task_pipeline(cfg, output_path)   # reads cfg.inputs, writes JSON lines

``run_task_pipeline`` reads every file of ``inputs`` (any format the file reader
knows), keeps only ``target_fields`` (when set), applies the operators in order and
writes the result as ``output_path`` (JSON lines), which then serves as
``buffer.explorer_input.taskset``. With ``data_juicer`` (``service.data_juicer``) its
``data_juicer`` operators use that Data-Juicer service, which the pipeline starts
(``auto_start``) and ``close()`` stops.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from trinity.buffer.file_reader import read_rows
from trinity.pipeline.data_juicer import open_service, with_service
from trinity.pipeline.operator import TASK_OPERATORS, OperatorError, TaskOperator, build_operator

if TYPE_CHECKING:
    from trinity.config.schema import DataJuicerServiceConfig


class TaskPipeline:
    """A chain of task operators built from ``[{name, args}, ...]``."""

    def __init__(
        self,
        operators_cfg: Iterable[Any] | None = None,
        data_juicer: DataJuicerServiceConfig | None = None,
    ) -> None:
        self.data_juicer = open_service(data_juicer)
        try:
            self.operators: list[TaskOperator] = [
                build_operator(TASK_OPERATORS, with_service(cfg, self.data_juicer))
                for cfg in operators_cfg or []
            ]
        except BaseException:
            self.close()  # stops a service an operator started
            raise

    def process(self, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, float]]:
        metrics = {"task_pipeline/input": float(len(rows))}
        for op in self.operators:
            rows = op.process(list(rows))
        metrics["task_pipeline/output"] = float(len(rows))
        return rows, metrics

    def close(self) -> None:
        if self.data_juicer is not None:
            self.data_juicer.close()


def run_task_pipeline(
    cfg: Any, output_path: str, data_juicer: DataJuicerServiceConfig | None = None
) -> tuple[str, dict[str, float]]:
    """Read ``cfg.inputs``, process them, write ``output_path``; returns (path, metrics).

    ``data_juicer``: the run's ``service.data_juicer``, started and stopped here."""
    inputs = list(getattr(cfg, "inputs", None) or [])
    if not inputs:
        raise OperatorError("data_processor.task_pipeline.inputs names no task file")
    rows: list[dict[str, Any]] = []
    for path in inputs:
        rows.extend(read_rows(path))
    fields = list(getattr(cfg, "target_fields", None) or [])
    if fields:
        rows = [{k: row[k] for k in fields if k in row} for row in rows]
    pipeline = TaskPipeline(getattr(cfg, "operators", None), data_juicer)
    try:
        rows, metrics = pipeline.process(rows)
    finally:
        pipeline.close()
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    tmp = f"{output_path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, output_path)  # a crash never leaves a half-written taskset
    return output_path, metrics
