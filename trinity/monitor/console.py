"""Console monitor: one compact line per step through the ``logging`` module.

``[trainer] step 12 | actor/entropy=2.31 actor/pg_loss=-0.0123 ...`` (keys sorted). The
line goes to the ``trinity.monitor.console`` logger, so an actor that captures library
logs also gets it in its log file; with no logging configured at all it goes to stderr.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

from trinity.monitor.base import Monitor, RunInfo, format_value
from trinity.monitor.registry import MONITORS
from trinity.utils.log import DATE_FORMAT, get_logger


def format_line(role: str, metrics: Mapping[str, float], step: int) -> str:
    pairs = " ".join(f"{key}={format_value(metrics[key])}" for key in sorted(metrics))
    return f"[{role}] step {step} | {pairs}"


@MONITORS.register("console")
class ConsoleMonitor(Monitor):
    def __init__(self, run: RunInfo, monitor_args: Mapping[str, Any]) -> None:
        self.role = run.role
        self.logger = get_logger("trinity.monitor.console")
        self.logger.setLevel(logging.INFO)
        if not self.logger.hasHandlers():
            # Nothing would print INFO records; the console monitor exists to be seen.
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(
                logging.Formatter("[%(asctime)s] %(message)s", datefmt=DATE_FORMAT)
            )
            self.logger.addHandler(handler)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.logger.info(format_line(self.role, metrics, step))

    def close(self) -> None:
        """Nothing to release: the logger outlives the run."""
