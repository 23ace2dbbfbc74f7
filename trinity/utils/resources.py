"""Ray resource requests of the actors, shared by the launcher and the dry-run report.

Logical CPUs are fractional so a whole run fits a 2-core machine; in synchronous mode
the explorer and the trainer take turns, and each uses every core while it works.
"""

EXPLORER_CPUS = 0.5  # the explorer actor, with its rollout engine and runner threads
TRAINER_CPUS = 0.5  # each trainer rank
SERVICE_CPUS = 0.0  # experience buffer and synchronizer: they only wait and move data
ENGINE_CPUS = 0.0  # each extra rollout engine: it decodes while the explorer waits on it
