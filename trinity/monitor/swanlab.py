"""SwanLab monitor (``pip install swanlab``; imported only when selected).

The run is ``<name>_<role>`` in project ``<project>``, in group ``<name>`` with job type
``<role>``, tagged with both. ``monitor_args`` (Trinity-RFT's names): ``mode``
(``online``, or its older name ``cloud``, the default; ``offline`` writes the run files
only, for ``swanlab sync`` later; ``local``; ``disabled``), ``logdir`` (default
``<job_dir>/monitor/swanlab``), ``api_key`` (overrides SWANLAB_API_KEY),
``workspace``, ``experiment_name`` (default ``<name>_<role>``), ``description``,
``tags`` (added to the two), ``id`` and ``resume``. The key is handed to SwanLab's own
settings: nothing is written to ``~`` and no prompt waits for one, so a run of mode
``online`` without a key stops at once with SwanLab's message.

SwanLab keeps one run per process: ``close`` finishes it, so the next stage's run can
start in the same actor. Unless SwanLab's own settings say otherwise, while the run is
open it copies what the process prints to its run log, as it does for any script.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trinity.monitor.base import Monitor, RunInfo
from trinity.monitor.registry import MONITORS

PASSED_ON = ("workspace", "description", "id", "resume")


@MONITORS.register("swanlab")
class SwanlabMonitor(Monitor):
    def __init__(self, run: RunInfo, monitor_args: Mapping[str, Any]) -> None:
        try:
            import swanlab
        except ImportError as exc:
            raise ImportError(
                "monitor.monitor_type 'swanlab' needs the swanlab package: run `pip install "
                "swanlab`, or choose monitor.monitor_type: tensorboard"
            ) from exc
        if swanlab.has_run():
            raise RuntimeError(
                "monitor.monitor_type 'swanlab': this process already has an open SwanLab "
                "run, and SwanLab keeps one per process; close its monitor first"
            )
        tags = [str(t) for t in monitor_args.get("tags") or []]
        tags += [t for t in (run.role, run.name) if t not in tags]
        settings: dict[str, Any] = {"interactive": False}
        if monitor_args.get("api_key"):
            settings["api_key"] = str(monitor_args["api_key"])
        self.run = swanlab.init(
            project=run.project,
            name=str(monitor_args.get("experiment_name") or run.run_name),
            group=run.name,
            job_type=run.role,
            tags=tags,
            mode=str(monitor_args.get("mode") or "online"),
            log_dir=str(monitor_args.get("logdir") or run.monitor_dir / "swanlab"),
            config=dict(run.config_dict or {}),
            settings=swanlab.Settings(**settings),
            **{key: monitor_args[key] for key in PASSED_ON if monitor_args.get(key) is not None},
        )
        self._closed = False

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=int(step))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.run.finish()
