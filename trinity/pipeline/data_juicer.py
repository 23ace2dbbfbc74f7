"""``data_juicer``: run Data-Juicer operators inside the task or experience pipeline.

Data-Juicer is an optional dependency (``pip install py-data-juicer``), imported only
when a pipeline names this operator. Its operators come from a Data-Juicer recipe
(``config_path``: a YAML file whose ``process`` list names the operators) or from
``process`` given inline::

    - name: data_juicer
      args:
        process:
          - text_length_filter: {min_len: 10}

Task rows go through as they are. Experiences become samples with ``text`` (the
response), ``query`` (the prompt) and ``response``; the statistics Data-Juicer
filters compute (its ``__dj__stats__`` column) are copied into ``exp.info`` so a
later ``reward_shaping_mapper`` can use them, and experiences a filter removes are
dropped.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import yaml

from trinity.pipeline.operator import (
    EXPERIENCE_OPERATORS,
    TASK_OPERATORS,
    ExperienceOperator,
    OperatorError,
    TaskOperator,
)
from trinity.types import Experience

PIP_PACKAGE = "py-data-juicer"
STATS_FIELD = "__dj__stats__"
INDEX_FIELD = "__trinity_index__"


class DataJuicerMissingError(ImportError):
    """The data_juicer operator is configured but Data-Juicer is not installed."""


class DataJuicerRunner:
    """Loads the recipe's operators once and runs them over a list of rows."""

    def __init__(self, config_path: str | None = None, process: list[Any] | None = None) -> None:
        if importlib.util.find_spec("data_juicer") is None:
            raise DataJuicerMissingError(
                "the 'data_juicer' operator needs Data-Juicer, which is not installed: "
                f"pip install {PIP_PACKAGE}"
            )
        if (config_path is None) == (process is None):
            raise OperatorError("data_juicer needs exactly one of config_path or process")
        if config_path is not None:
            with open(config_path, encoding="utf-8") as f:
                recipe = yaml.safe_load(f) or {}
            process = recipe.get("process")
            if not process:
                raise OperatorError(f"data_juicer recipe '{config_path}' has no 'process' list")
        ops_module = importlib.import_module("data_juicer.ops")
        self._ops = ops_module.load_ops(process)
        self._dataset_cls = importlib.import_module("data_juicer.core.data").NestedDataset

    def run(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not rows:
            return []
        dataset = self._dataset_cls.from_list(rows)
        for op in self._ops:
            dataset = op.run(dataset)
        return dataset.to_list()


@TASK_OPERATORS.register("data_juicer")
class DataJuicerTaskOperator(TaskOperator):
    def __init__(self, config_path: str | None = None, process: list[Any] | None = None) -> None:
        self.runner = DataJuicerRunner(config_path, process)

    def process(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = self.runner.run(rows)
        for row in out:
            row.pop(STATS_FIELD, None)
        return out


@EXPERIENCE_OPERATORS.register("data_juicer")
class DataJuicerExperienceOperator(ExperienceOperator):
    def __init__(self, config_path: str | None = None, process: list[Any] | None = None) -> None:
        self.runner = DataJuicerRunner(config_path, process)

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        samples = [
            {
                INDEX_FIELD: i,
                "text": exp.response_text or "",
                "query": exp.prompt_text or "",
                "response": exp.response_text or "",
            }
            for i, exp in enumerate(exps)
        ]
        kept = []
        for sample in self.runner.run(samples):
            exp = exps[int(sample[INDEX_FIELD])]
            for key, value in (sample.get(STATS_FIELD) or {}).items():
                exp.info[key] = _plain(value)
            kept.append(exp)
        return kept, {"data_juicer/dropped": float(len(exps) - len(kept))}


def _plain(value: Any) -> Any:
    """A JSON-storable copy of a statistic (numpy scalars and arrays become numbers/lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
