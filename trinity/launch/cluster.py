"""Connecting to Ray: join a running cluster, or start a local one for this run.

``cluster.ray_address`` (or ``RAY_ADDRESS``) names a cluster to join. With "auto" or
nothing we
join the cluster started on this machine with ``ray start --head`` when it is alive,
and otherwise start a local Ray instance that lives as long as this process.

Ray >= 2.59 authenticates with a token by default; a cluster and a client that
disagree about ``RAY_AUTH_MODE`` or the token cannot talk. That case is reported as
such instead of silently starting a second cluster beside the running one.

The actors' stdout and stderr (transformers' "Loading weights" bars, library warnings)
stay in Ray's worker log files (``log_to_driver`` off); each actor's own log is
``<job_dir>/log/<actor>.log``. An actor's failure still reaches the terminal: ``ray.get``
re-raises its exception with the traceback, and Ray's error messages (a worker that
died) reach the driver whatever ``log_to_driver`` says.

How OpenMP threads wait depends on whether the run's processes compute at the same time
(:func:`torch_work_overlaps`). A synchronous run alternates explorer and trainer, so a
Ray instance started here keeps libgomp's default: a thread that finished its share of
an op spins briefly before it sleeps, and the next op starts without waking anyone.
When the explorer may run ahead of the trainer, or several engines decode side by side,
the workers get ``OMP_WAIT_POLICY=PASSIVE`` through the job's ``runtime_env`` (the
driver's environment is unchanged): a thread spinning while its sibling is descheduled
would hold every op until the scheduler comes back. Sleeping costs a wake-up per
parallel op (on an idle 2-core VM the demo's steps took 2-3x longer: docs/benchmarks.md),
hence the default. ``OMP_WAIT_POLICY`` set in the environment always wins.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trinity.config import Config

logger = logging.getLogger("trinity.launch")

_AUTH_HINT = (
    "if the cluster uses token authentication, give this process the same RAY_AUTH_MODE and "
    "token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) that `ray start` used"
)


# says whether token authentication is on for a cluster being started: for the one a
# run starts for itself and stops at its end, a line of start-up noise
_TOKEN_SETUP_LOGGER = "ray._private.authentication.authentication_token_setup"


class ClusterError(RuntimeError):
    """Ray could not be reached or started."""


def _alive(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def running_cluster_address() -> str | None:
    """Address of a live cluster started on this machine by ``ray start``, if any."""
    try:
        from ray._private.utils import read_ray_address
    except ImportError:  # private helper moved: behave as if none is running
        return None
    address = read_ray_address()
    return address if address and _alive(address) else None


def _address_from_environment() -> str:
    """``RAY_ADDRESS`` when it names a live cluster; a stale one is dropped.

    Ray itself exports ``RAY_ADDRESS`` after ``ray.init``, so a process that once ran a
    local instance (or its children) can carry the address of a cluster long gone.
    """
    value = os.environ.get("RAY_ADDRESS", "")
    if not value or value == "auto" or "://" in value:
        return value
    if _alive(value):
        # the local head is joined through "auto", which also finds its session settings
        return "auto" if value == running_cluster_address() else value
    logger.warning("ignoring RAY_ADDRESS=%s: no Ray cluster answers there", value)
    del os.environ["RAY_ADDRESS"]
    return ""


def _auth_mode_for(address: str) -> None:
    """Turn on token authentication for a client joining ``address`` by name.

    ``ray start`` uses token authentication by default, but a client given an explicit
    address assumes none unless RAY_AUTH_MODE says so (with "auto" Ray reads the local
    session's settings instead). A token-mode client also joins a cluster without
    authentication, so the mode is turned on whenever a token is at hand and the user
    chose no mode. Ray caches its config at import, hence its own helper, which refreshes it.
    """
    if address == "auto" or "RAY_AUTH_MODE" in os.environ:
        return
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def torch_work_overlaps(config: Config) -> bool:
    """Whether several processes of ``config``'s run may run torch work at the same time:
    the explorer ahead of the trainer (``sync_interval`` > 1, ``sync_offset`` > 0 or
    any ``sync_style`` but fixed in mode both), or several engines decoding side by side."""
    sync, explorer = config.synchronizer, config.explorer
    ahead = sync.sync_interval > 1 or sync.sync_offset > 0 or sync.sync_style != "fixed"
    engines = explorer.rollout_model.engine_num + sum(
        m.engine_num for m in explorer.auxiliary_models
    )
    return (config.mode == "both" and ahead) or engines > 1


def connect(ray_address: str | None, namespace: str, overlapping: bool = False) -> str:
    """Initialise Ray in this process; returns "joined" or "started".

    The run's workers get the variables of ``process_policy.worker_env`` through the
    job's ``runtime_env``, and this process's environment stays as it is (beyond the
    ``RAY_ADDRESS`` Ray exports and a stale one dropped). A cluster started here gives its
    workers libgomp's default wait policy (a thread that finished its share of a
    parallel op spins briefly before it sleeps), unless ``overlapping``
    (:func:`torch_work_overlaps`): then OpenMP threads sleep at once
    (``OMP_WAIT_POLICY=PASSIVE``), as threads spinning while a sibling is descheduled
    make every torch op wait for the scheduler when several processes share the cores.
    Waking sleeping threads costs each parallel op more than it takes on a small model
    when nothing else runs: the demo's steps took 2-3x longer with PASSIVE on an idle
    2-core machine. The environment's own ``OMP_WAIT_POLICY`` always wins.
    """
    import ray

    from trinity.launch import process_policy

    if ray.is_initialized():
        return "joined"
    common = {"namespace": namespace, "logging_level": logging.WARNING, "log_to_driver": False}
    address = "" if ray_address in (None, "", "auto") else ray_address
    if not address:
        address = _address_from_environment()
    if address in ("", "auto"):
        running = running_cluster_address()
        # "auto" (not the address itself) lets Ray pick up the local session's settings
        address = "auto" if running else ""
    started_here = not address
    common["runtime_env"] = {
        "env_vars": process_policy.worker_env(started_here=started_here, overlapping=overlapping),
        "worker_process_setup_hook": process_policy.SETUP_HOOK,
    }
    if started_here:
        os.environ.pop("RAY_ADDRESS", None)  # else ray.init would look for that cluster
        # "local": a new instance even when a stale /tmp/ray/ray_current_cluster names a dead one
        with _quiet(_TOKEN_SETUP_LOGGER):
            ray.init(
                address="local",
                num_cpus=os.cpu_count() or 1,
                include_dashboard=False,
                _system_config=process_policy.system_config(),
                **common,
            )
        return "started"
    _auth_mode_for(address)
    try:
        ray.init(address=address, **common)
    except Exception as exc:
        where = running_cluster_address() if address == "auto" else address
        raise ClusterError(f"cannot join the Ray cluster at {where}: {exc}; {_AUTH_HINT}") from exc
    return "joined"


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Only errors from logger ``name`` while the block runs; its level is restored after."""
    logger_ = logging.getLogger(name)
    level = logger_.level
    logger_.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger_.setLevel(level)
