"""Task operators, the task pipeline, and the prepared taskset it writes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trinity.buffer import TasksetReader, read_rows
from trinity.pipeline import (
    TASK_OPERATORS,
    OperatorError,
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
