"""Ray resource requests of the actors, shared by the launcher and the dry-run report, and
the GPUs Ray has and gives.

Logical CPUs are fractional so a whole run fits a 2-core machine; in synchronous mode
the explorer and the trainer take turns, and each uses every core while it works.
"""

EXPLORER_CPUS = 0.5  # the explorer actor, with its rollout engine and runner threads
TRAINER_CPUS = 0.5  # each trainer rank
SERVICE_CPUS = 0.0  # experience buffer and synchronizer: they only wait and move data
ENGINE_CPUS = 0.0  # each extra rollout engine: it decodes while the explorer waits on it


def cluster_gpus() -> float:
    """The GPUs of the Ray cluster this process is connected to (0 without Ray)."""
    import ray

    return ray.cluster_resources().get("GPU", 0) if ray.is_initialized() else 0


def gpu_ids() -> list[int]:
    """The GPU ids Ray gave the calling actor ([] on CPU)."""
    import ray

    return [int(i) if str(i).isdigit() else i for i in ray.get_gpu_ids()]
