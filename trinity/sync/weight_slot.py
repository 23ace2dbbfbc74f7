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
being overwritten (``begin_read`` .. ``end_read``). The driver creates the file
(:func:`new_slot_path`) and removes it when the run ends (:func:`remove_slot`), both
through :func:`run_slot`, which makes one for a run that can use it.

Every process that uses the file holds a shared ``flock`` on it: the driver from
creation to removal, the trainer's writer and each reader while they map it. A driver
killed before it could remove its file leaves it unlocked, and the next run's
:func:`remove_stale_slots` removes only files whose exclusive lock it can take. A
process id in the name would not do: the id of a dead driver is reused, and containers
sharing ``/dev/shm`` see each other's files but not each other's processes.

Without a writable ``/dev/shm`` on Linux (macOS has none) there is no slot: the run
says so once and the weights go through Ray's object store.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import mmap
import os
import sys
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from trinity.config import Config

SHM_DIR = Path("/dev/shm")
PREFIX = "trinity-weights-"
_ALIGN = 64  # every tensor starts on a cache line (and on its dtype's alignment)
_logger = logging.getLogger("trinity.sync")
_held: dict[str, int] = {}  # slot path -> the driver's locked descriptor, until remove_slot


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


def slot_unavailable(platform: str | None = None) -> str | None:
    """Why this machine cannot hold a weight slot, or None when it can."""
    platform = platform or sys.platform
    if not platform.startswith("linux"):
        return f"{platform} has no {SHM_DIR}"
    if not SHM_DIR.is_dir() or not os.access(SHM_DIR, os.W_OK):
        return f"{SHM_DIR} is missing or not writable"
    return None


def new_slot_path() -> str | None:
    """A fresh file under /dev/shm that this process (the driver) keeps locked until
    :func:`remove_slot`, or None where there is no slot (said once, in the log). Also
    removes the files of earlier runs that nobody holds."""
    reason = slot_unavailable()
    if reason is not None:
        _logger.warning(
            "no shared-memory weight slot (%s): weights go through Ray's object store", reason
        )
        return None
    remove_stale_slots()
    name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
    # created and locked under a name remove_stale_slots does not match, then renamed
    # (the lock stays with the file), so no cleanup ever sees it unlocked
    hidden = SHM_DIR / f".{name}"
    fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    path = str(SHM_DIR / name)
    os.rename(hidden, path)
    _held[path] = fd
    return path


def remove_slot(path: str | None) -> None:
    if path:
        Path(path).unlink(missing_ok=True)
        fd = _held.pop(path, None)
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def run_slot(config: Config) -> Iterator[str | None]:
    """The slot of a ``sync_method: memory`` run in mode both whose Ray cluster is this
    one node (None otherwise), removed when the run ends."""
    import ray

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


def remove_stale_slots() -> list[str]:
    """Remove the slot files in ``SHM_DIR`` that no process holds; returns their paths."""
    removed = []
    for path in SHM_DIR.glob(f"{PREFIX}*"):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:  # gone meanwhile, or another user's
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                path.unlink()
                removed.append(str(path))
        except OSError:  # held by a live run (BlockingIOError), or gone meanwhile
            pass
        finally:
            os.close(fd)
    return removed


def _open_locked(path: str, flags: int) -> int:
    """A descriptor of ``path`` holding a shared lock, so no cleanup removes the file."""
    fd = os.open(path, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        raise
    return fd


def pack(state: dict[str, torch.Tensor], align: int) -> tuple[tuple[SlotEntry, ...], int]:
    """(entries, total bytes) of ``state`` packed into one flat buffer, each tensor
    starting on an ``align``-byte boundary (the CPU file here, the GPU buffer of
    ``trinity.sync.cuda_slot``)."""
    entries, offset = [], 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        dtype = str(tensor.dtype).removeprefix("torch.")
        entries.append(SlotEntry(name, dtype, tuple(tensor.shape), offset, nbytes))
        offset += -(-nbytes // align) * align
    return tuple(entries), max(offset, align)


def views(buffer: torch.Tensor, entries: tuple[SlotEntry, ...]) -> dict[str, torch.Tensor]:
    """The tensors of ``entries`` as views of the flat ``uint8`` ``buffer``."""
    import torch

    return {
        e.name: buffer[e.offset : e.offset + e.nbytes].view(getattr(torch, e.dtype)).view(e.shape)
        for e in entries
    }


def layout(state: dict[str, torch.Tensor], path: str) -> SlotVersion:
    entries, size = pack(state, _ALIGN)
    return SlotVersion(path, size, entries)


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
        self._fd: int | None = None  # open and locked while the writer maps the file
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
        if self._map is not None:
            self._map.close()
            self._map, self._size = None, 0
        if self._fd is None:
            self._fd = _open_locked(self.path, os.O_RDWR | os.O_CREAT)
        fd = self._fd
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
        self._size = size

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
            self._size = 0
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None


class SlotReader:
    """The explorer's end: maps the file once and returns views of one version."""

    def __init__(self) -> None:
        self._map: mmap.mmap | None = None
        self._fd: int | None = None  # open and locked while the reader maps the file
        self._key: tuple[str, int] | None = None

    def read(self, version: SlotVersion) -> SlotState:
        """Read-only tensors over the file, valid until ``end_read`` (the engine copies
        them into its weights)."""
        if self._key != (version.path, version.size):
            self.close()
            self._fd = _open_locked(version.path, os.O_RDONLY)
            self._map = mmap.mmap(self._fd, version.size, mmap.MAP_SHARED, mmap.PROT_READ)
            self._key = (version.path, version.size)
        return SlotState(views(_bytes(self._map), version.entries), version)

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view of the old version is still alive; the GC unmaps
                pass
            self._map = None
            self._key = None
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None
