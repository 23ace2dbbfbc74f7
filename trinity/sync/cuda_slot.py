"""One GPU buffer of the weights, rewritten by the trainer, read by the explorer on its GPU

The explorer on the same GPU opens it by a CUDA IPC handle: the weights go device to
device.

When the trainer and the explorer share one GPU (``trinity.utils.device.shares_one_gpu``:
mode both, one node, one GPU), a broadcast cannot carry the weights (NCCL refuses two
ranks on one device) and the CPU slot (``trinity.sync.weight_slot``) would copy them to
host memory and back. Instead the trainer keeps one flat ``uint8`` CUDA buffer sized for
one version, copies each version into it, and hands the explorer a CUDA IPC handle of
the buffer (``torch.multiprocessing.reductions.reduce_tensor``: picklable, sent through
the Synchronizer like any published version). The explorer opens the handle once, views
the tensors in it and its engine copies them into its weights on the same device.

The protocol is the CPU slot's: the trainer writes only between the Synchronizer's
``begin_write`` and ``publish``, the explorer reads between ``begin_read`` and
``end_read``, so a version is never overwritten while it is copied. The buffer lives as
long as the writer; a new layout (another size) allocates a new buffer and a new handle.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trinity.sync.weight_slot import SlotEntry, pack, views

if TYPE_CHECKING:
    import torch

    from trinity.config import Config

_ALIGN = 256  # every tensor starts on a 256-byte boundary (CUDA's allocation alignment)


def same_gpu(config: Config) -> bool:
    """Whether the trainer and the explorer share one GPU and pass the weights through
    the trainer's GPU buffer (this module): ``sync_method`` ``nccl`` or ``memory`` in a
    run whose one GPU both use (``trinity.utils.device.shares_one_gpu``)."""
    from trinity.utils.device import shares_one_gpu  # imports torch, which this module defers

    return config.synchronizer.sync_method in ("nccl", "memory") and shares_one_gpu(config)


@dataclass(frozen=True)
class CudaSlotVersion:
    """What the synchronizer hands the explorer: the buffer's IPC handle and the layout."""

    handle: Any  # (rebuild function, args) of reduce_tensor, valid in another process
    key: str  # identifies the buffer: a new one (another size, another writer) a new key
    size: int
    entries: tuple[SlotEntry, ...]


def cuda_layout(state: dict[str, torch.Tensor]) -> tuple[tuple[SlotEntry, ...], int]:
    """(entries, total bytes) of ``state`` packed into one buffer, each tensor aligned."""
    return pack(state, _ALIGN)


class CudaSlotWriter:
    """The trainer's end: one CUDA buffer, rewritten in place with each version."""

    # what the trainer's log names as the slot's place
    path = "GPU memory shared with the explorer (CUDA IPC)"

    def __init__(self) -> None:
        self.usable = True
        self._buffer: torch.Tensor | None = None
        self._handle: Any = None
        self._key = ""

    def write(self, state: dict[str, torch.Tensor]) -> CudaSlotVersion:
        """Copy ``state`` (on this GPU or anywhere else) into the buffer (between the
        synchronizer's ``begin_write`` and ``publish``); returns what the explorer needs
        to read it."""
        import torch
        from torch.multiprocessing.reductions import reduce_tensor

        entries, size = cuda_layout(state)
        if self._buffer is None or self._buffer.numel() != size:
            device = torch.device("cuda", torch.cuda.current_device())
            self._buffer = torch.empty(size, dtype=torch.uint8, device=device)
            self._handle = reduce_tensor(self._buffer)
            self._key = uuid.uuid4().hex
        targets = views(self._buffer, entries)
        with torch.no_grad():
            for entry in entries:
                targets[entry.name].copy_(state[entry.name].detach())
        torch.cuda.synchronize(self._buffer.device)  # complete before the explorer reads
        return CudaSlotVersion(self._handle, self._key, size, entries)

    def close(self) -> None:
        self._buffer = None
        self._handle = None


class CudaSlotReader:
    """The explorer's end: opens the trainer's buffer once and returns views of a version
    (CUDA tensors on the shared device, valid until ``end_read``)."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None
        self._key: str | None = None

    def read(self, version: CudaSlotVersion) -> dict[str, torch.Tensor]:
        if self._key != version.key or self._buffer is None:
            rebuild, args = version.handle
            self._buffer = rebuild(*args)
            self._key = version.key
        return views(self._buffer, version.entries)

    def close(self) -> None:
        self._buffer = None
        self._key = None
