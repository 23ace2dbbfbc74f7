"""``data_processor.experience_pipeline``: operators applied to every batch of experiences.

    pipeline = ExperiencePipeline(config.data_processor.experience_pipeline.operators)
    exps, metrics = pipeline.process(exps)     # between the workflow runners and the buffer

Operators run in the configured order, each on what the previous one kept. Metrics
are merged; ``pipeline/kept`` and ``pipeline/dropped`` count the whole pipeline. With
``save_path`` (``save_input``) every batch is appended to that JSON-lines file first,
as it came in, so what the operators dropped or changed can be looked at later.
With ``data_juicer`` (``service.data_juicer``) its ``data_juicer`` operators use that
Data-Juicer service, which the pipeline starts (``auto_start``) and ``close()`` stops.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from trinity.buffer.jsonl import JsonlWriter
from trinity.pipeline.data_juicer import open_service, with_service
from trinity.pipeline.operator import EXPERIENCE_OPERATORS, ExperienceOperator, build_operator
from trinity.types import Experience

if TYPE_CHECKING:
    from trinity.config.schema import DataJuicerServiceConfig


class ExperiencePipeline:
    """A chain of experience operators built from ``[{name, args}, ...]``."""

    def __init__(
        self,
        operators_cfg: Iterable[Any] | None = None,
        save_path: str | os.PathLike[str] | None = None,
        data_juicer: DataJuicerServiceConfig | None = None,
    ) -> None:
        self.data_juicer = open_service(data_juicer)
        try:
            self.operators: list[ExperienceOperator] = [
                build_operator(EXPERIENCE_OPERATORS, with_service(cfg, self.data_juicer))
                for cfg in operators_cfg or []
            ]
        except BaseException:
            if self.data_juicer is not None:
                self.data_juicer.close()  # stops a service an operator started
            raise
        self.input_writer = JsonlWriter(save_path) if save_path is not None else None

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        if self.input_writer is not None:
            self.input_writer.write(exps)
        total = len(exps)
        metrics: dict[str, float] = {}
        for op in self.operators:
            exps, op_metrics = op.process(list(exps))
            metrics.update(op_metrics)
        if self.operators:
            metrics["pipeline/kept"] = float(len(exps))
            metrics["pipeline/dropped"] = float(total - len(exps))
        return exps, metrics

    def __len__(self) -> int:
        return len(self.operators)

    def close(self) -> None:
        if self.input_writer is not None:
            self.input_writer.close()
        if self.data_juicer is not None:
            self.data_juicer.close()
