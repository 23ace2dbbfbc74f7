"""Task operators, the task pipeline, and the prepared taskset it writes."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trinity.buffer import TasksetReader, read_rows
from trinity.pipeline import (
    TASK_OPERATORS,
    OperatorError,
    RowTaskOperator,
    TaskPipeline,
    build_operator,
    run_task_pipeline,
)

ROWS = [
    {"question": "1+1", "answer": "2", "level": 1},
    {"question": "2+2", "answer": "4", "level": 3},
    {"question": "1+1", "answer": "2", "level": 2},
    {"question": "9*9", "answer": "81"},
]


def op(name: str, **args):
    return build_operator(TASK_OPERATORS, {"name": name, "args": args})


def questions(rows) -> list[str]:
    return [r["question"] for r in rows]


def test_value_filter() -> None:
    assert questions(op("value_filter", key="level", keep_values=[1, 2]).process(ROWS)) == [
        "1+1",
        "1+1",
    ]
    assert questions(op("value_filter", key="level", drop_values=[1]).process(ROWS)) == [
        "2+2",
        "1+1",
    ]
    assert questions(op("value_filter", key="level", min_value=2).process(ROWS)) == ["2+2", "1+1"]
    assert questions(
        op("value_filter", key="level", max_value=2, keep_missing=True).process(ROWS)
    ) == [
        "1+1",
        "1+1",
        "9*9",
    ]
    with pytest.raises(
        OperatorError, match="needs keep_values, drop_values, min_value or max_value"
    ):
        op("value_filter", key="level")


def test_dedupe() -> None:
    # by question: the first 1+1 is kept
    assert [r.get("level") for r in op("dedupe", keys=["question"]).process(ROWS)] == [1, 3, None]
    # by every key: the two 1+1 rows differ in level
    assert len(op("dedupe").process(ROWS + [dict(ROWS[0])])) == 4


def test_pipeline_metrics() -> None:
    rows, metrics = TaskPipeline(
        [
            {"name": "dedupe", "args": {"keys": ["question"]}},
            {"name": "value_filter", "args": {"key": "level", "min_value": 2}},
        ]
    ).process(ROWS)
    assert questions(rows) == ["2+2"]
    assert metrics == {"task_pipeline/input": 4.0, "task_pipeline/output": 1.0}


@dataclass
class TaskPipelineConfig:
    inputs: list[str]
    operators: list[dict] = field(default_factory=list)
    target_fields: list[str] = field(default_factory=list)
    num_process: int = 1


def test_run_task_pipeline_writes_a_taskset(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS[:2]))
    (tmp_path / "b.csv").write_text("question,answer,level,source\n1+1,2,5,web\n3+3,6,1,web\n")
    cfg = TaskPipelineConfig(
        inputs=[str(tmp_path / "a.jsonl"), str(tmp_path / "b.csv")],
        operators=[{"name": "dedupe", "args": {"keys": ["question"]}}],
        target_fields=["question", "answer"],
    )
    out, metrics = run_task_pipeline(cfg, str(tmp_path / "prepared" / "train.jsonl"))
    assert read_rows(out) == [
        {"question": "1+1", "answer": "2"},
        {"question": "2+2", "answer": "4"},
        {"question": "3+3", "answer": "6"},
    ]
    assert metrics == {"task_pipeline/input": 4.0, "task_pipeline/output": 3.0}

    @dataclass
    class Fmt:
        prompt_key: str = "question"

    @dataclass
    class Storage:
        path: str
        name: str = "prepared"
        format: Fmt = field(default_factory=Fmt)

    reader = TasksetReader(Storage(path=out), batch_size=3, default_workflow="math_workflow")
    assert [t.prompt for t in reader.read_batch()] == ["1+1", "2+2", "3+3"]
    with pytest.raises(OperatorError, match="inputs names no task file"):
        run_task_pipeline(TaskPipelineConfig(inputs=[]), str(tmp_path / "x.jsonl"))


class StampProcess(RowTaskOperator):
    """Writes the id of the process that saw the row into it."""

    def process_row(self, row: dict) -> dict:
        return {**row, "pid": os.getpid()}


def test_num_process_shares_row_operators_between_workers(tmp_path: Path) -> None:
    rows = [{"question": f"{i % 9}*{i % 9}", "level": i % 4} for i in range(20)] + ROWS
    (tmp_path / "raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    operators = [
        {"name": "value_filter", "args": {"key": "level", "min_value": 1, "keep_missing": True}},
        {"name": "dedupe", "args": {"keys": ["question"]}},  # needs every row: in this process
        {"name": "value_filter", "args": {"key": "level", "drop_values": [2]}},
        {"name": f"{__name__}.StampProcess"},
    ]
    outputs = {}
    for num_process in (1, 2):
        cfg = TaskPipelineConfig(
            inputs=[str(tmp_path / "raw.jsonl")], operators=operators, num_process=num_process
        )
        out, metrics = run_task_pipeline(cfg, str(tmp_path / f"out_{num_process}.jsonl"))
        outputs[num_process] = (read_rows(out), metrics)
    (one, one_metrics), (two, two_metrics) = outputs[1], outputs[2]
    assert [{k: v for k, v in r.items() if k != "pid"} for r in two] == [
        {k: v for k, v in r.items() if k != "pid"} for r in one
    ]
    assert two_metrics == one_metrics and 0 < len(one) < len(rows)
    assert {r["pid"] for r in one} == {os.getpid()}
    # two workers, each a contiguous share (half of the rows before its filter ran)
    pids = [r["pid"] for r in two]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert sum(a != b for a, b in zip(pids[:-1], pids[1:], strict=True)) == 1


class Fails(RowTaskOperator):
    def process_row(self, row: dict) -> dict:
        raise KeyError("no such field")


def test_num_process_must_be_positive_and_a_worker_error_fails_the_pipeline() -> None:
    with pytest.raises(OperatorError, match="num_process must be >= 1, got 0"):
        TaskPipeline([], num_process=0)
    pipeline = TaskPipeline([{"name": f"{__name__}.Fails"}], num_process=2)
    with pytest.raises(OperatorError, match="worker 0: Traceback(.|\n)*KeyError: 'no such field'"):
        pipeline.process(ROWS)
