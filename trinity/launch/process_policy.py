"""The process-wide settings ``trinity run`` gives the processes it starts, and only those.

Importing trinity or building its classes in one's own program changes no environment
variable, allocator or library function; these settings are tuning for a run's own
processes:

- ``THP_MEM_ALLOC_ENABLE=1``: torch's CPU allocator aligns tensors of 2 MiB and more to
  huge pages and madvises them, so a step's large temporaries cost a few page faults
  instead of one per 4 KiB (a bf16 train step of the default model: ~90k faults without,
  ~20k with, and about a tenth less time). torch reads it at its first allocation. The
  driver gets it from :func:`apply_to_driver` (the ``trinity run`` command, before it
  imports anything), Ray's workers from the job's ``runtime_env``.
- ``OMP_WAIT_POLICY=PASSIVE`` for the workers of a Ray instance the run starts itself,
  when its processes' torch work may overlap (``trinity.launch.cluster``).
- Ray's worker niceness 0 for an instance the run starts (Ray lowers its workers'
  priority by default; the actors are the run's real work), and undeduplicated worker
  logs in the driver (``RAY_DEDUP_LOGS=0``, read when Ray is imported).
- The trainer's heap policy (``trainer.keep_memory_between_steps``,
  ``trinity.utils.memory``), applied by the trainer's actors.
- ``explorer.env_vars``: the explorer's and its engines' actors start with them.
- The driver's working directory (``TRINITY_DRIVER_DIR``): every worker of the run enters
  it as it starts (:func:`enter_driver_directory`, the job's
  ``worker_process_setup_hook``), so relative paths of the config (the default
  ``./checkpoints``, a taskset, an SQLite file) name the same files in the actors as in
  the driver. Workers start in the directory of their raylet: on a cluster started with
  ``ray start`` elsewhere, not the driver's.

A variable already set in the driver's environment always wins (but the directory).
"""

from __future__ import annotations

import os

THP = "THP_MEM_ALLOC_ENABLE"
OMP_WAIT_POLICY = "OMP_WAIT_POLICY"
DRIVER_DIR = "TRINITY_DRIVER_DIR"
SETUP_HOOK = "trinity.launch.process_policy.enter_driver_directory"
_DRIVER = {THP: "1", "RAY_DEDUP_LOGS": "0"}


def _unset(values: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in values.items() if key not in os.environ}


def apply_to_driver() -> None:
    """Set the driver's variables in this process (``trinity run``'s own), before it
    imports torch or Ray."""
    os.environ.update(_unset(_DRIVER))


def worker_env(*, started_here: bool, overlapping: bool) -> dict[str, str]:
    """Variables for every Ray worker of the run (the job's ``runtime_env``):
    ``started_here``: the run starts its own Ray instance; ``overlapping``: its
    processes' torch work may overlap (``cluster.torch_work_overlaps``)."""
    env = {THP: "1"}
    if started_here and overlapping:
        env[OMP_WAIT_POLICY] = "PASSIVE"
    return {**_unset(env), DRIVER_DIR: os.getcwd()}


def enter_driver_directory() -> None:
    """Ray's ``worker_process_setup_hook`` of a run: this worker moves into the driver's
    working directory, where it exists on this node (else it stays, saying so once)."""
    directory = os.environ.get(DRIVER_DIR)
    if not directory or os.path.realpath(directory) == os.path.realpath(os.getcwd()):
        return
    if os.path.isdir(directory):
        os.chdir(directory)
    else:
        import logging

        logging.getLogger("trinity.launch").warning(
            "the driver's directory %s is not on this node: relative paths of the config "
            "are read from %s here",
            directory,
            os.getcwd(),
        )


def system_config() -> dict[str, int]:
    """Ray settings of an instance the run starts itself."""
    return {} if "RAY_worker_niceness" in os.environ else {"worker_niceness": 0}


def actor_env(env_vars: dict[str, str]) -> dict[str, object] | None:
    """Ray ``runtime_env`` of an actor whose process starts with ``env_vars``
    (``explorer.env_vars``; Ray merges them over the job's); None when there are none."""
    return {"env_vars": {str(k): str(v) for k, v in env_vars.items()}} if env_vars else None
