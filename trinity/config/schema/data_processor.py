"""``data_processor``: operators applied to tasks before exploring and to experiences after."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trinity.config.setting import setting


@dataclass
class OperatorConfig:
    """One operator of a pipeline, by registered name."""

    name: str = setting("", "registered operator name")
    args: dict[str, Any] = setting({}, "arguments of the operator")


@dataclass
class TaskPipelineConfig:
    """Turns raw task files into the training taskset."""

    num_process: int = setting(1, "worker processes of the pipeline")
    operators: list[OperatorConfig] = setting([], "operators applied in order")
    inputs: list[str] = setting(
        [],
        "raw task files; the output (<job_dir>/buffer/task_pipeline/<taskset name>.jsonl) "
        "becomes the data of buffer.explorer_input.taskset",
    )
    target_fields: list[str] = setting([], "fields of the raw tasks the operators read and keep")


@dataclass
class ExperiencePipelineConfig:
    """Runs on every batch of experiences between the explorer and the buffer."""

    operators: list[OperatorConfig] = setting(
        [], "operators applied in order (e.g. reward shaping, filters)"
    )
    save_input: bool = setting(
        False, "append every experience the pipeline receives, before its operators, to a file"
    )
    input_save_path: str | None = setting(
        None,
        "JSON-lines file save_input writes; unset: <job_dir>/buffer/experience_pipeline_input.jsonl",
    )


@dataclass
class DataProcessorConfig:
    """Task and experience pipelines."""

    task_pipeline: TaskPipelineConfig | None = setting(
        None, "task preprocessing; unset: tasks are used as read"
    )
    experience_pipeline: ExperiencePipelineConfig = setting(
        ExperiencePipelineConfig, "experience processing"
    )
