"""``data_processor.task_pipeline``: turn raw task files into the training taskset.

    rows, metrics = TaskPipeline(cfg.operators).process(rows)
    path = run_task_pipeline(cfg, output_path)   # reads cfg.inputs, writes JSON lines

``run_task_pipeline`` reads every file of ``inputs`` (any format the file reader
knows), keeps only ``target_fields`` (when set), applies the operators in order and
writes the result as ``output_path`` (JSON lines), which then serves as
``buffer.explorer_input.taskset``. With ``data_juicer`` (``service.data_juicer``) its
``data_juicer`` operators use that Data-Juicer service, which the pipeline starts
(``auto_start``) and ``close()`` stops.

``num_process`` > 1: each run of consecutive row-at-a-time operators (``RowTaskOperator``,
e.g. ``value_filter``) goes over that many worker processes, each taking a contiguous
share of the rows, and their outputs are joined in order, so the result is the one a
single process gives. Other operators (``dedupe`` compares rows, ``data_juicer`` runs its
own engine) run in this process on all rows. Workers are spawned, not forked (the driver
may hold threads), so each pays one import of ``trinity.pipeline``; a worker's exception
fails the pipeline with its traceback.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import traceback
from collections.abc import Iterable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from trinity.buffer.file_reader import read_rows
from trinity.pipeline.data_juicer import open_service, with_service
from trinity.pipeline.operator import (
    TASK_OPERATORS,
    OperatorError,
    RowTaskOperator,
    TaskOperator,
    build_operator,
)

if TYPE_CHECKING:
    from trinity.config.schema import DataJuicerServiceConfig


class TaskPipeline:
    """A chain of task operators built from ``[{name, args}, ...]``."""

    def __init__(
        self,
        operators_cfg: Iterable[Any] | None = None,
        data_juicer: DataJuicerServiceConfig | None = None,
        num_process: int = 1,
    ) -> None:
        if num_process < 1:
            raise OperatorError(f"task pipeline num_process must be >= 1, got {num_process}")
        self.num_process = num_process
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
        workers = None  # started by the first stage that shares its rows, kept for the others
        try:
            for stage in _stages(self.operators):
                if self.num_process > 1 and isinstance(stage[0], RowTaskOperator) and rows:
                    workers = workers or _Workers(self.num_process)
                    rows = workers.apply(stage, rows)
                else:
                    rows = _apply(stage, rows)
        finally:
            if workers is not None:
                workers.close()
        metrics["task_pipeline/output"] = float(len(rows))
        return rows, metrics

    def close(self) -> None:
        if self.data_juicer is not None:
            self.data_juicer.close()


def _stages(operators: list[TaskOperator]) -> list[list[TaskOperator]]:
    """The operators in order, consecutive row-at-a-time ones grouped together."""
    stages: list[list[TaskOperator]] = []
    for op in operators:
        rowwise = isinstance(op, RowTaskOperator)
        if stages and rowwise and isinstance(stages[-1][-1], RowTaskOperator):
            stages[-1].append(op)
        else:
            stages.append([op])
    return stages


def _apply(operators: list[TaskOperator], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for op in operators:
        rows = op.process(list(rows))
    return rows


class _Workers:
    """``count`` spawned processes, each with its own pipe, so share i of the rows always
    goes to worker i (a shared queue would let the first worker up take every share)."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes, self.processes = [], []
        for _ in range(count):
            mine, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs,), daemon=True)
            process.start()
            theirs.close()
            self.pipes.append(mine)
            self.processes.append(process)

    def apply(
        self, operators: list[TaskOperator], rows: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """``_apply(operators, rows)``: a contiguous share of ``rows`` per worker, the
        outputs joined in order."""
        size = math.ceil(len(rows) / len(self.pipes))
        shares = [rows[i : i + size] for i in range(0, len(rows), size)]
        for pipe, share in zip(self.pipes[: len(shares)], shares, strict=True):
            pipe.send((operators, share))
        out: list[dict[str, Any]] = []
        for index, pipe in enumerate(self.pipes[: len(shares)]):
            try:
                ok, result = pipe.recv()
            except EOFError:
                raise OperatorError(f"task pipeline worker {index} exited") from None
            if not ok:
                raise OperatorError(f"task pipeline worker {index}: {result}")
            out.extend(result)
        return out

    def close(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(None)
            except OSError:
                pass  # already gone
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


def _serve(pipe: Connection) -> None:
    """A worker: ``(operators, rows)`` in, ``(True, rows)`` or ``(False, traceback)`` out."""
    while (job := pipe.recv()) is not None:
        try:
            pipe.send((True, _apply(*job)))
        except Exception:
            pipe.send((False, traceback.format_exc()))


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
    pipeline = TaskPipeline(
        getattr(cfg, "operators", None), data_juicer, int(getattr(cfg, "num_process", 1) or 1)
    )
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
