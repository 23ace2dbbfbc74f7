"""Metrics of a run: monitor backends, the always-on jsonl file, plots, progress.

``make_monitor(...)`` builds the monitor of the explorer or trainer run; importing this
package registers the built-in backends.
"""

from trinity.monitor import console, jsonl, mlflow, tensorboard, wandb  # noqa: F401 (registers backends)
from trinity.monitor.base import Monitor, MonitorGroup, RunInfo
from trinity.monitor.registry import MONITORS, make_monitor

__all__ = ["MONITORS", "Monitor", "MonitorGroup", "RunInfo", "make_monitor"]
