"""Connecting to Ray: join a running cluster, or start a local one for this run.

``cluster.ray_address`` (or ``RAY_ADDRESS``) names a cluster to join. Without one we
first try to join a cluster started on this machine with ``ray start --head``; when
none is running, a local Ray instance is started for this process and stopped with it.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("trinity.launch")


class ClusterError(RuntimeError):
    """Ray could not be reached or started."""


def connect(ray_address: str | None, namespace: str) -> str:
    """Initialise Ray in this process; returns "joined" or "started"."""
    import ray

    if ray.is_initialized():
        return "joined"
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    address = ray_address or os.environ.get("RAY_ADDRESS") or ""
    common = {"namespace": namespace, "logging_level": logging.WARNING, "log_to_driver": True}
    if address and address != "auto":
        try:
            ray.init(address=address, **common)
        except Exception as exc:
            raise ClusterError(f"cannot join the Ray cluster at '{address}': {exc}") from exc
        return "joined"
    try:
        ray.init(address="auto", **common)
        logger.info("joined the running Ray cluster")
        return "joined"
    except ConnectionError:
        pass
    except Exception as exc:  # a cluster exists but refused us (e.g. authentication)
        if "auto" == address:
            raise ClusterError(f"cannot join the running Ray cluster: {exc}") from exc
        logger.warning("could not join a running Ray cluster (%s); starting a local one", exc)
    ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, **common)
    return "started"
