"""What a run is doing: monitor backends, the always-on jsonl file, plots, progress,
the Ray timeline (``timeline``) and the reader of the per-actor log files (``log_files``).

``make_monitor(...)`` builds the monitor of the explorer or trainer run; importing this
package registers the built-in backends. The metric names are listed in docs/metrics.md.
"""

from trinity.monitor import (  # noqa: F401 (registers backends)
    console,
    jsonl,
    mlflow,
    swanlab,
    tensorboard,
    wandb,
)
from trinity.monitor.base import Monitor, MonitorGroup, RunInfo
from trinity.monitor.registry import MONITORS, make_monitor

__all__ = ["MONITORS", "Monitor", "MonitorGroup", "RunInfo", "make_monitor"]
