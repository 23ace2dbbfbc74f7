"""The synchronizer: the meeting point of trainer and explorer for model weights.

The trainer ``publish``es a new policy version every ``sync_interval`` steps; the
explorer ``wait_for``s the version it needs before an explore step. With
``sync_method: memory`` (and ``nccl`` on a machine without GPUs) the weights travel as
an object in Ray's object store, kept here by reference; with ``checkpoint`` the trainer
writes them to ``global_step_N/actor`` and only the version number passes through here.

It also keeps each role's latest step and metrics, which the launcher polls to draw
the progress bar. It runs as an asyncio Ray actor so waiting never blocks reporting.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any


class SyncTimeout(TimeoutError):
    """The explorer waited longer than ``synchronizer.sync_timeout`` for new weights."""


class Synchronizer:
    def __init__(self) -> None:
        self.version = 0
        self.weights: list[Any] | None = None  # [ObjectRef] wrapped so Ray keeps it a ref
        self._changed = asyncio.Condition()
        self.status: dict[str, dict[str, Any]] = {}
        self.finished: dict[str, bool] = {}

    async def publish(self, version: int, weights: list[Any] | None) -> None:
        async with self._changed:
            self.version = version
            self.weights = weights
            self._changed.notify_all()

    async def wait_for(self, version: int, timeout: float) -> tuple[int, list[Any] | None]:
        """Block until a version >= ``version`` exists (or the trainer has finished)."""
        deadline = time.monotonic() + timeout
        async with self._changed:
            while self.version < version and not self.finished.get("trainer"):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SyncTimeout(
                        f"no policy version >= {version} after {timeout:.0f}s "
                        f"(have {self.version}); raise synchronizer.sync_timeout if the trainer is slow"
                    )
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=remaining)
                except asyncio.TimeoutError:
                    continue
            return self.version, self.weights

    async def latest(self) -> tuple[int, list[Any] | None]:
        """The newest published version and its weights, without waiting."""
        return self.version, self.weights

    async def report(self, role: str, step: int, metrics: dict[str, float]) -> None:
        self.status[role] = {"step": step, "metrics": metrics, "time": time.time()}

    async def finish(self, role: str) -> None:
        async with self._changed:
            self.finished[role] = True
            self._changed.notify_all()

    async def get_status(self) -> dict[str, Any]:
        return {"version": self.version, "roles": self.status, "finished": self.finished}
