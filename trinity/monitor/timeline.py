"""The Ray timeline of a run (``monitor.enable_ray_timeline``).

``write_ray_timeline(job_dir)`` asks the connected Ray cluster for its task events and
writes them to ``<job_dir>/monitor/timeline.json`` in Chrome trace format: open it in
``chrome://tracing`` or https://ui.perfetto.dev to see which actor ran what, and when.
Call it at the end of a run, while Ray is still connected.
"""

from __future__ import annotations

from pathlib import Path

TIMELINE_NAME = "timeline.json"


class TimelineError(RuntimeError):
    """No timeline can be written (Ray is not connected)."""


def timeline_path(job_dir: Path) -> Path:
    return Path(job_dir) / "monitor" / TIMELINE_NAME


def write_ray_timeline(job_dir: Path) -> Path:
    """Write the Chrome-trace timeline of the connected Ray cluster; returns its path.

    Raises:
        TimelineError: Ray is not initialised in this process.
    """
    import ray

    if not ray.is_initialized():
        raise TimelineError(
            "monitor.enable_ray_timeline: Ray is not connected; write the timeline before "
            "ray.shutdown()"
        )
    path = timeline_path(job_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    ray.timeline(filename=str(path))
    return path
