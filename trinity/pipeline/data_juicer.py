"""``data_juicer``: run Data-Juicer operators inside the task or experience pipeline.

Its operators come from a Data-Juicer recipe (``config_path``: a YAML file whose
``process`` list names the operators) or from ``process`` given inline::

    - name: data_juicer
      args:
        process:
          - text_length_filter: {min_len: 10}

Without ``service.data_juicer`` the recipe runs in the pipeline's process, which needs
Data-Juicer installed (``pip install py-data-juicer``, imported only when a pipeline
names this operator). With it, the rows go to the Data-Juicer service
(``trinity.service.data_juicer``) the pipeline started (``auto_start``) or reaches
(``server_url``, with its ``token``); a recipe file is read here and sent with the rows.
The service runs only the data-only operators of
``trinity/service/data_juicer/allowlist.py`` unless ``allow_code_operators`` lets it run
any; in this process any operator runs, as the run's own config wrote it.

Task rows go through as they are. Experiences become samples with ``text`` (the
response), ``query`` (the prompt) and ``response``; the statistics Data-Juicer
filters compute (its ``__dj__stats__`` column) are copied into ``exp.info`` so a
later ``reward_shaping_mapper`` can use them, and experiences a filter removes are
dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import yaml

from trinity.pipeline.operator import (
    EXPERIENCE_OPERATORS,
    TASK_OPERATORS,
    ExperienceOperator,
    OperatorError,
    TaskOperator,
    operator_spec,
)
from trinity.service.data_juicer.runner import (
    STATS_FIELD,
    DataJuicerMissingError,
    DataJuicerRunner,
    require_data_juicer,
)
from trinity.types import Experience

if TYPE_CHECKING:
    from trinity.config.schema import DataJuicerServiceConfig
    from trinity.service.data_juicer.client import DataJuicerClient, DataJuicerService

__all__ = ["DataJuicerMissingError", "open_service", "with_service"]

NAME = "data_juicer"
INDEX_FIELD = "__trinity_index__"


class Runner(Protocol):
    def run(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]: ...


class _ServiceRunner:
    """Runs the recipe on the Data-Juicer service."""

    def __init__(self, client: DataJuicerClient, process: list[Any]) -> None:
        self.client = client
        self.process = process

    def run(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.client.process(self.process, rows) if rows else []


def make_runner(
    config_path: str | None, process: list[Any] | None, service: DataJuicerService | None
) -> Runner:
    """The recipe's runner: on ``service`` when given, else in this process."""
    from trinity.service.data_juicer.client import DataJuicerService

    if service is None:
        require_data_juicer(f"the '{NAME}' operator")
    elif not isinstance(service, DataJuicerService):
        raise OperatorError(
            f"{NAME}: the Data-Juicer service is configured under service.data_juicer, "
            f"not in the operator's args (given service={service!r})"
        )
    if (config_path is None) == (process is None):
        raise OperatorError(f"{NAME} needs exactly one of config_path or process")
    if config_path is not None:
        with open(config_path, encoding="utf-8") as f:
            recipe = yaml.safe_load(f) or {}
        process = recipe.get("process")
        if not process:
            raise OperatorError(f"{NAME} recipe '{config_path}' has no 'process' list")
    assert process is not None
    if service is None:
        return DataJuicerRunner(process)
    return _ServiceRunner(service.client(), process)


def open_service(cfg: DataJuicerServiceConfig | None) -> DataJuicerService | None:
    """The service ``service.data_juicer`` describes (started or reached on first use)."""
    if cfg is None:
        return None
    from trinity.service.data_juicer.client import DataJuicerService

    return DataJuicerService(cfg)


def with_service(cfg: Any, service: DataJuicerService | None) -> Any:
    """``cfg`` with ``args.service`` set when it names this operator and a service is set."""
    name, args = operator_spec(cfg)
    if service is None or name != NAME:
        return cfg
    return {"name": name, "args": {**args, "service": service}}


class _RecipeOperator:
    """Built from a recipe (``config_path`` or ``process``) and the pipeline's service."""

    def __init__(
        self,
        config_path: str | None = None,
        process: list[Any] | None = None,
        service: DataJuicerService | None = None,
    ) -> None:
        self.runner = make_runner(config_path, process, service)


@TASK_OPERATORS.register(NAME)
class DataJuicerTaskOperator(_RecipeOperator, TaskOperator):
    def process(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = self.runner.run(rows)
        for row in out:
            row.pop(STATS_FIELD, None)
        return out


@EXPERIENCE_OPERATORS.register(NAME)
class DataJuicerExperienceOperator(_RecipeOperator, ExperienceOperator):
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
            exp.info.update(sample.get(STATS_FIELD) or {})
            kept.append(exp)
        return kept, {"data_juicer/dropped": float(len(exps) - len(kept))}
