"""One shared-memory file that the trainer overwrites with each new policy version.

With ``sync_method: memory`` the weights used to travel through Ray's object store as a
new object per version. The store's pages live in a tmpfs file and stay resident after
an object is freed, and a new version is allocated while the old one is still held, so
over a demo run the store kept about 0.9 GiB of pages (3-4 versions of SmolLM2 in bf16)
for the one version the explorer needed. When the trainer, the explorer and the driver
share one node, the weights go through this slot instead: one file in ``/dev/shm``,
sized for one version and rewritten in place.

The synchronizer keeps the two ends apart: the trainer writes only while no explorer
reads (``begin_write`` .. ``publish``) and an explorer reads only a version that is not
being overwritten (``begin_read`` .. ``end_read``). The driver chooses the file's name
(:func:`new_slot_path`) and removes the file when the run ends (:func:`remove_slot`);
names carry the driver's pid, so a later run removes the file of a driver that was
killed before it could.
"""

from __future__ import annotations

import mmap
import os
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SHM_DIR = Path("/dev/shm")
PREFIX = "trinity-weights-"
_ALIGN = 64  # every tensor starts on a cache line (and on its dtype's alignment)


class SlotFull(OSError):
    """The slot's file system cannot hold a version (a small ``/dev/shm``, as in a
    container started with its default 64 MB)."""


@dataclass(frozen=True)
class SlotEntry:
    name: str
    dtype: str  # "bfloat16", "float32", ...
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class SlotVersion:
    """What the synchronizer hands the explorer in place of an object reference."""

    path: str
    size: int
    entries: tuple[SlotEntry, ...]


def new_slot_path() -> str | None:
    """A fresh file name under /dev/shm for this driver, or None without /dev/shm. Also
    removes the slots of drivers that no longer run."""
    if not SHM_DIR.is_dir() or not os.access(SHM_DIR, os.W_OK):
        return None
    for stale in SHM_DIR.glob(f"{PREFIX}*"):
        pid = stale.name.removeprefix(PREFIX).split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            stale.unlink(missing_ok=True)
    return str(SHM_DIR / f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}")


def remove_slot(path: str | None) -> None:
    if path:
        Path(path).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def layout(state: dict[str, torch.Tensor], path: str) -> SlotVersion:
    entries, offset = [], 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        dtype = str(tensor.dtype).removeprefix("torch.")
        entries.append(SlotEntry(name, dtype, tuple(tensor.shape), offset, nbytes))
        offset += -(-nbytes // _ALIGN) * _ALIGN
    return SlotVersion(path, max(offset, _ALIGN), tuple(entries))


def _bytes(mapped: mmap.mmap | None) -> torch.Tensor:
    """A uint8 tensor over the whole mapping (no copy)."""
    import torch

    with warnings.catch_warnings():  # torch warns about a read-only mapping's buffer
        warnings.filterwarnings("ignore", message=".*not writable.*")
        return torch.frombuffer(mapped, dtype=torch.uint8)  # type: ignore[arg-type]


class SlotState(dict):
    """The tensors of one slot version (views of the file), and the version itself:
    rollout engines in other actors of the node read the file too instead of receiving
    a copy through the object store."""

    def __init__(self, tensors: dict[str, torch.Tensor], version: SlotVersion) -> None:
        super().__init__(tensors)
        self.version = version


class SlotWriter:
    """The trainer's end: maps the file and copies each version into it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.usable = True  # False once the file system could not hold a version
        self._map: mmap.mmap | None = None
        self._size = 0

    def write(self, state: dict[str, torch.Tensor]) -> SlotVersion:
        """Copy ``state`` into the file (call between the synchronizer's ``begin_write``
        and ``publish``); returns what the explorer needs to read it."""
        version = layout(state, self.path)
        if version.size != self._size:
            self._remap(version.size)
        buffer = _bytes(self._map)
        for entry in version.entries:
            tensor = state[entry.name].detach()
            target = buffer[entry.offset : entry.offset + entry.nbytes]
            target.view(tensor.dtype).view(tensor.shape).copy_(tensor)
        return version

    def _remap(self, size: int) -> None:
        self.close()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, size)
            try:
                # every page now, or ENOSPC now: a tmpfs that runs out of pages while a
                # mapping is written kills the writer with SIGBUS
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                os.ftruncate(fd, 0)
                raise SlotFull(
                    exc.errno,
                    f"{Path(self.path).parent} cannot hold one version of the weights "
                    f"({size / 2**20:.0f} MiB): {exc.strerror}",
                ) from None
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._size = size

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
            self._size = 0


class SlotReader:
    """The explorer's end: maps the file once and returns views of one version."""

    def __init__(self) -> None:
        self._map: mmap.mmap | None = None
        self._key: tuple[str, int] | None = None

    def read(self, version: SlotVersion) -> SlotState:
        """Read-only tensors over the file, valid until ``end_read`` (the engine copies
        them into its weights)."""
        import torch

        if self._key != (version.path, version.size):
            self.close()
            fd = os.open(version.path, os.O_RDONLY)
            try:
                self._map = mmap.mmap(fd, version.size, mmap.MAP_SHARED, mmap.PROT_READ)
            finally:
                os.close(fd)
            self._key = (version.path, version.size)
        buffer = _bytes(self._map)
        tensors = {
            e.name: buffer[e.offset : e.offset + e.nbytes]
            .view(getattr(torch, e.dtype))
            .view(e.shape)
            for e in version.entries
        }
        return SlotState(tensors, version)

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view of the old version is still alive; the GC unmaps
                pass
            self._map = None
            self._key = None
