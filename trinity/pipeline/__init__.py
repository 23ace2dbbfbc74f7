"""Data pipelines (``data_processor``): operators over experiences and taskset rows.

- ``ExperiencePipeline(operators_cfg).process(exps) -> (exps, metrics)`` runs between
  the workflow runners and the experience buffer;
- ``TaskPipeline(operators_cfg).process(rows) -> (rows, metrics)`` and
  ``run_task_pipeline(cfg, output_path)`` prepare a taskset.

Built-in experience operators: ``reward_shaping_mapper``, ``invalid_reward_filter``,
``zero_variance_filter``, ``reward_filter``, ``reward_std_filter``,
``dapo_dynamic_sampling``, ``mask_response_truncated``, ``pass_rate_stats``,
``pass_rate_calculator``, ``data_juicer``. Task operators:
``value_filter``, ``dedupe``, ``data_juicer``. New operators subclass
``ExperienceOperator``/``TaskOperator`` (``RowTaskOperator`` for one that looks at one
row at a time, which ``num_process`` workers may share) and register with
``EXPERIENCE_OPERATORS.register(name)``/``TASK_OPERATORS.register(name)``.
"""

# imported for their registrations
from trinity.pipeline import (  # noqa: F401
    dapo,
    data_juicer,
    experience_filters,
    pass_rate,
    reward_shaping,
    task_operators,
)
from trinity.pipeline.experience_pipeline import ExperiencePipeline
from trinity.pipeline.operator import (
    EXPERIENCE_OPERATORS,
    TASK_OPERATORS,
    ExperienceOperator,
    OperatorError,
    RowTaskOperator,
    TaskOperator,
    build_operator,
)
from trinity.pipeline.task_pipeline import TaskPipeline, run_task_pipeline

__all__ = [
    "EXPERIENCE_OPERATORS",
    "TASK_OPERATORS",
    "ExperienceOperator",
    "ExperiencePipeline",
    "OperatorError",
    "RowTaskOperator",
    "TaskOperator",
    "TaskPipeline",
    "build_operator",
    "run_task_pipeline",
]
