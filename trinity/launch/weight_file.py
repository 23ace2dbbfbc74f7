"""The weight file of a one-node ``sync_method: memory`` run: one shared-memory file that
the trainer rewrites in place and the explorer maps (``trinity.sync.weight_slot``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from trinity.config import Config


@contextlib.contextmanager
def weight_slot(config: Config) -> Iterator[str | None]:
    """The shared-memory file of a one-node ``sync_method: memory`` run (None otherwise),
    removed when the run ends (``trinity.sync.weight_slot``)."""
    import ray

    from trinity.sync.weight_slot import new_slot_path, remove_slot

    path = None
    if config.mode == "both" and config.synchronizer.sync_method == "memory":
        here = ray.get_runtime_context().get_node_id()
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        if nodes == [here]:
            path = new_slot_path()
    try:
        yield path
    finally:
        remove_slot(path)
