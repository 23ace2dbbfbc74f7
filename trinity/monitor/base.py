"""The monitor contract: a sink for one run's scalar metrics, step by step.

The explorer and the trainer each own one monitor; their metrics go to two runs named
``<name>_explorer`` and ``<name>_trainer`` (the same split veRL users see as two runs).
A backend is a ``Monitor`` subclass built as ``cls(run, monitor_args)`` and registered
in ``trinity.monitor.registry.MONITORS`` under its ``monitor.monitor_type`` name.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trinity.utils.log import get_logger

ROLES = ("explorer", "trainer", "bench")  # bench: mode bench, one row per evaluated checkpoint

logger = get_logger(__name__)


@dataclass(frozen=True)
class RunInfo:
    """Who is logging: the experiment (project, name), the role, and where files go."""

    project: str
    name: str
    role: str  # "explorer" or "trainer"
    job_dir: Path  # <checkpoint_root_dir>/<project>/<name>
    config_dict: Mapping[str, Any] | None = None  # the resolved config, recorded once

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"monitor role must be one of {ROLES}, got '{self.role}'")

    @property
    def run_name(self) -> str:
        return f"{self.name}_{self.role}"

    @property
    def monitor_dir(self) -> Path:
        return Path(self.job_dir) / "monitor"


class Monitor(ABC):
    """Receives ``{metric_key: value}`` once per step; ``close`` flushes and releases."""

    @abstractmethod
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_warned_keys: set[str] = set()


def as_scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Convert values to ``float`` (ints, bools, numpy and 0-d torch scalars all work).

    Values that are not scalars are dropped with one warning per key, because a
    malformed metric must not stop a training run. NaN and infinities are kept.
    """
    out: dict[str, float] = {}
    for key, value in metrics.items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError, RuntimeError):
            if key not in _warned_keys:
                _warned_keys.add(key)
                logger.warning("metric '%s' is not a scalar (%r); it is not logged", key, value)
    return out


def format_value(value: float) -> str:
    """Compact text for a metric value: 4 significant digits, ``nan``/``inf`` as is."""
    return f"{value:.4g}" if math.isfinite(value) else str(value)


class MonitorGroup(Monitor):
    """Fans each call out to several monitors.

    A failing backend (an unreachable tracking server, a full disk) is logged and
    counted, and the others still receive the metrics: losing a chart must not end a
    training run.
    """

    def __init__(self, monitors: Sequence[Monitor]) -> None:
        self.monitors = list(monitors)
        self.failures: dict[str, int] = {}

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        scalars = as_scalars(metrics)
        for monitor in self.monitors:
            try:
                monitor.log(scalars, step)
            except Exception as exc:
                self._count_failure(monitor, "log", exc)

    def close(self) -> None:
        for monitor in self.monitors:
            try:
                monitor.close()
            except Exception as exc:
                self._count_failure(monitor, "close", exc)

    def _count_failure(self, monitor: Monitor, what: str, exc: Exception) -> None:
        name = type(monitor).__name__
        self.failures[name] = self.failures.get(name, 0) + 1
        logger.warning(
            "%s.%s failed (%d failure(s) so far): %s", name, what, self.failures[name], exc
        )
