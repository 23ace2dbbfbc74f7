"""The always-on metrics file: one JSON object per ``log`` call.

``<job_dir>/monitor/<run_name>_metrics.jsonl``, each line ``{"step": 3, "<key>": value,
...}``. Non-finite values are written as the tokens ``NaN``, ``Infinity`` and
``-Infinity``, which Python's ``json`` module reads back as floats. A run that resumes
appends to the same file, so a step may appear twice; readers keep the later value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trinity.monitor.base import Monitor, RunInfo
from trinity.monitor.registry import MONITORS
from trinity.utils.log import get_logger

SUFFIX = "_metrics.jsonl"

logger = get_logger(__name__)


def metrics_path(monitor_dir: Path, run_name: str) -> Path:
    return Path(monitor_dir) / f"{run_name}{SUFFIX}"


def metric_files(monitor_dir: Path) -> list[Path]:
    """The metric files of every run in ``monitor_dir``, sorted by name; below it too,
    where a run's name has a "/" (a stage's runs: ``<name>/<stage>_explorer``)."""
    return sorted(Path(monitor_dir).rglob(f"*{SUFFIX}"))


def run_name_of(path: Path) -> str:
    """``.../gsm8k_explorer_metrics.jsonl`` -> ``gsm8k_explorer``."""
    return Path(path).name.removesuffix(SUFFIX)


def read_metrics(path: Path) -> list[dict[str, float]]:
    """All records of a metrics file in file order.

    A line that does not parse (a run killed mid-write) is skipped with a warning.
    """
    records: list[dict[str, float]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                logger.warning("%s:%d is not valid JSON; line skipped", path, lineno)
                continue
            if isinstance(record, dict) and "step" in record:
                records.append(record)
    return records


@MONITORS.register("jsonl")
class JsonlMonitor(Monitor):
    """Appends ``{"step": step, **metrics}`` to the run's metrics file, flushed per call."""

    def __init__(self, run: RunInfo, monitor_args: Mapping[str, Any]) -> None:
        self.path = metrics_path(run.monitor_dir, run.run_name)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        record = {"step": int(step), **{k: float(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
