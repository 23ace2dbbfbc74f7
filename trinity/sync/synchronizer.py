"""The synchronizer: the meeting point of trainer and explorer for model weights.

The trainer ``publish``es a new policy version every ``sync_interval`` steps; the
explorer ``wait_for``s the version it needs before an explore step (with
``sync_style: explorer_driven`` it ``request``s the trainer's current weights instead,
and the trainer publishes when it sees the request). With
``sync_method: memory`` the weights travel as an object in Ray's object store, kept here
by reference; with ``checkpoint`` the trainer writes them to ``global_step_N/actor`` and
with ``nccl`` it broadcasts them to the rollout engines (``trinity.sync.collective``):
only the version number passes through here, plus the broadcast group's address and
the explorer's transfer requests, which the trainer's sender thread serves.

It also keeps each role's latest step and metrics, which the launcher polls to draw
the progress bar. It runs as an asyncio Ray actor so waiting never blocks reporting.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from trinity.sync.errors import SyncTimeout, WeightBroadcastError


class Synchronizer:
    def __init__(self, weight_slot: str | None = None) -> None:
        """``weight_slot``: the shared-memory file the weights travel through with
        ``sync_method: memory`` on one node (``trinity.sync.weight_slot``), else None."""
        self.version = 0
        # [ObjectRef] wrapped so Ray keeps it a ref, or [SlotVersion]
        self.weights: list[Any] | None = None
        self.weight_slot = weight_slot
        self.readers = 0  # explorers copying the slot's version
        self.writing = False  # the trainer is overwriting the slot
        self.requested = False  # sync_style explorer_driven: the explorer asked for weights
        self._changed = asyncio.Condition()
        self.status: dict[str, dict[str, Any]] = {}
        self.finished: dict[str, bool] = {}
        # sync_method nccl: where the broadcast group meets, and transfer requests
        self.group_address: Any = None
        self.group_error: str | None = None
        self._transfers: asyncio.Queue[str] = asyncio.Queue()

    async def publish(self, version: int, weights: list[Any] | None) -> None:
        async with self._changed:
            self.version = version
            self.weights = weights
            self.writing = False
            self.requested = False
            self._changed.notify_all()

    # ---------------------------------------------------------------- weight slot
    async def slot_path(self) -> str | None:
        return self.weight_slot

    async def begin_write(self, timeout: float) -> None:
        """The trainer may overwrite the slot once no explorer reads it; until its
        ``publish``, no explorer starts reading."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: self.readers == 0), timeout)
            except asyncio.TimeoutError:
                raise SyncTimeout(
                    f"the explorer did not finish copying policy version {self.version} "
                    f"within {timeout:.0f}s; raise synchronizer.sync_timeout if it is slow"
                ) from None
            self.writing = True

    async def begin_read(self, timeout: float) -> tuple[int, list[Any] | None]:
        """The slot's version, which stays there until ``end_read`` (it may be newer
        than the one ``wait_for`` or ``latest`` named); waits at most ``timeout`` for a
        write in progress (a trainer that died mid-write never publishes)."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: not self.writing), timeout)
            except asyncio.TimeoutError:
                raise SyncTimeout(
                    f"the trainer began overwriting policy version {self.version} in the "
                    f"weight slot and published nothing within {timeout:.0f}s; see the "
                    "trainer's log, or raise synchronizer.sync_timeout if it is slow"
                ) from None
            self.readers += 1
            return self.version, self.weights

    async def end_read(self) -> None:
        async with self._changed:
            self.readers = max(0, self.readers - 1)
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

    async def request(self, current: int, timeout: float) -> tuple[int, list[Any] | None]:
        """``explorer_driven``: the explorer asks the trainer to publish its current
        weights and waits for a version newer than ``current``; after ``timeout`` (or once
        the trainer has finished) it gets whatever is published, maybe ``current`` itself."""
        async with self._changed:
            self.requested = True
            self._changed.notify_all()
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(
                        lambda: self.version > current or self.finished.get("trainer")
                    ),
                    timeout,
                )
            except asyncio.TimeoutError:
                pass  # the explorer asks again at its next sync point
            return self.version, self.weights

    async def sync_requested(self) -> bool:
        """Whether the explorer waits for the trainer's current weights."""
        return self.requested

    async def latest(self) -> tuple[int, list[Any] | None]:
        """The newest published version and its weights, without waiting."""
        return self.version, self.weights

    async def open_weight_group(self, address: Any) -> None:
        """The trainer's weight sender hosts the broadcast group at ``address``."""
        async with self._changed:
            self.group_address = address
            self._changed.notify_all()

    async def weight_group_address(self, timeout: float) -> Any:
        """The broadcast group's address, once the trainer has opened it."""
        try:
            async with self._changed:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.group_address or self.group_error),
                    timeout,
                )
        except asyncio.TimeoutError:
            raise SyncTimeout(
                f"the trainer opened no weight broadcast group within {timeout:.0f}s; "
                "raise synchronizer.sync_timeout if the trainer is slow to start"
            ) from None
        self._raise_group_error()
        return self.group_address

    async def weight_group_failed(self, message: str) -> None:
        async with self._changed:
            self.group_error = message
            self._changed.notify_all()

    async def request_transfer(self, kind: str) -> None:
        """The explorer asks the trainer's sender to broadcast (``send``: the newest
        published weights; ``close``: the group's end) and then enters the broadcast."""
        self._raise_group_error()
        self._transfers.put_nowait(kind)

    async def next_transfer(self, timeout: float) -> str | None:
        """The sender's long poll: the next requested transfer, or None after ``timeout``."""
        try:
            return await asyncio.wait_for(self._transfers.get(), timeout)
        except asyncio.TimeoutError:
            return None

    def _raise_group_error(self) -> None:
        if self.group_error:
            raise WeightBroadcastError(self.group_error)

    async def report(self, role: str, step: int, metrics: dict[str, float]) -> None:
        self.status[role] = {"step": step, "metrics": metrics, "time": time.time()}

    async def finish(self, role: str) -> None:
        async with self._changed:
            self.finished[role] = True
            self._changed.notify_all()

    async def get_status(self) -> dict[str, Any]:
        return {"version": self.version, "roles": self.status, "finished": self.finished}
