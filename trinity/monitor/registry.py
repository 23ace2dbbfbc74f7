"""Monitor backends by ``monitor.monitor_type`` name, and the factory the modules call.

Built-in names: ``tensorboard``, ``console``, ``wandb``, ``mlflow``, ``swanlab`` and
``jsonl``. The
``jsonl`` file is written for every run whatever the chosen type, because plots and run
summaries read it (see ``trinity.monitor.plots``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trinity.monitor.base import Monitor, MonitorGroup, RunInfo
from trinity.utils.registry import Registry

MONITORS: Registry = Registry("monitor_type")

ALWAYS_ON = "jsonl"


def make_monitor(
    monitor_type: str | Sequence[str],
    *,
    project: str,
    name: str,
    role: str,
    job_dir: Path,
    monitor_args: Mapping[str, Any] | None = None,
    config_dict: Mapping[str, Any] | None = None,
) -> Monitor:
    """Build the monitor of one run, ``<name>_<role>``, plus the always-on jsonl file.

    ``monitor_type`` is one name, a comma-separated list (``"tensorboard,console"``) or
    a list of names. ``monitor_args`` is passed unchanged to every backend.
    """
    run = RunInfo(
        project=project, name=name, role=role, job_dir=Path(job_dir), config_dict=config_dict
    )
    names = _split_names(monitor_type)
    if ALWAYS_ON not in names:
        names.append(ALWAYS_ON)
    args = dict(monitor_args or {})
    built: list[Monitor] = []
    try:
        for backend in names:
            built.append(MONITORS.get(backend)(run, args))
    except BaseException:
        for monitor in built:  # release files already opened before the failing backend
            monitor.close()
        raise
    return MonitorGroup(built)


def _split_names(monitor_type: str | Sequence[str]) -> list[str]:
    raw = monitor_type.split(",") if isinstance(monitor_type, str) else list(monitor_type)
    names: list[str] = []
    for item in raw:
        item = str(item).strip()
        if item and item not in names:
            names.append(item)
    return names
