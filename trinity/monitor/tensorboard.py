"""TensorBoard monitor: event files under ``<job_dir>/monitor/tensorboard/<run_name>``.

Point TensorBoard at ``<job_dir>/monitor/tensorboard`` to see the explorer and trainer
runs side by side. The config is recorded once as a text summary named ``config``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from trinity.monitor.base import Monitor, RunInfo
from trinity.monitor.registry import MONITORS


@MONITORS.register("tensorboard")
class TensorBoardMonitor(Monitor):
    def __init__(self, run: RunInfo, monitor_args: Mapping[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter  # torch is heavy; load on use

        self.log_dir = run.monitor_dir / "tensorboard" / run.run_name
        self.writer = SummaryWriter(log_dir=str(self.log_dir))
        if run.config_dict:
            text = json.dumps(dict(run.config_dict), indent=2, sort_keys=True, default=str)
            # Indented lines render as a code block in TensorBoard's markdown view.
            self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)
        # Flush every step so a live TensorBoard and a crashed run both see all steps.
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
