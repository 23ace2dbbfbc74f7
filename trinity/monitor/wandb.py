"""Weights & Biases monitor (``pip install wandb``; imported only when selected).

The run is ``<name>_<role>`` in project ``<project>``, grouped by ``<name>`` so the
explorer and trainer runs of one experiment sit together. ``monitor_args``:
``base_url`` overrides WANDB_BASE_URL, ``api_key`` overrides WANDB_API_KEY.
``WANDB_MODE=offline`` works as usual (files under ``<job_dir>/monitor/wandb``).
Needs wandb >= 0.19.10, which can keep two runs open in one process. Closing the last
open run of a process waits until W&B's service process has written everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trinity.monitor.base import Monitor, RunInfo
from trinity.monitor.registry import MONITORS


@MONITORS.register("wandb")
class WandbMonitor(Monitor):
    _open_in_process = 0  # W&B runs of this process that are not finished yet

    def __init__(self, run: RunInfo, monitor_args: Mapping[str, Any]) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise ImportError(
                "monitor.monitor_type 'wandb' needs the wandb package: run `pip install wandb`, "
                "or choose monitor.monitor_type: tensorboard"
            ) from exc
        settings = {
            key: str(monitor_args[key]) for key in ("base_url", "api_key") if monitor_args.get(key)
        }
        run.monitor_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=run.project,
            name=run.run_name,
            group=run.name,
            job_type=run.role,
            config=dict(run.config_dict or {}),
            dir=str(run.monitor_dir),
            # The explorer and trainer may share a process; keep both runs open.
            reinit="create_new",
            settings=wandb.Settings(**settings),
        )
        WandbMonitor._open_in_process += 1
        self._closed = False

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.run.finish()
        WandbMonitor._open_in_process -= 1
        if WandbMonitor._open_in_process == 0:
            # finish() returns before W&B's service process has written everything (offline
            # files included); an actor may be killed right after closing, so wait for it.
            import wandb

            wandb.teardown()
