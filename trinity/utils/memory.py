"""Giving freed heap memory back to the operating system.

glibc's allocator keeps memory that a process has freed for later reuse. A training or
rollout step frees hundreds of megabytes of tensors of every size; the allocator keeps
most of it, fragmented across its arenas, so a trainer that needs ~2.5 GiB at its peak
sat at ~3.3 GiB between steps and the explorer doubled its resident size after the first
weight sync. Between steps, when nothing large is alive, :func:`release_free_memory`
returns the free pages (``malloc_trim``), which costs a few milliseconds.

A trainer wants the opposite within its run: each step allocates and frees the same
tensors, and every page the OS hands out anew costs a page fault on first touch
(under a hypervisor a slow and erratic one: the bf16 train step of the default model
took ~43,000 faults and ~1.25 s per step, and 0.91 s with none). By default glibc maps
every block above 32 MiB (the LM head's gradient, the logits) afresh and unmaps it on
free, and hands the top of its heaps back once more than a few MiB are free there, so a
step faults its largest tensors in again each time. :func:`keep_freed_memory` makes it
serve every block from its heaps and keep what is freed, so from the second step on a
step reuses pages it has already touched, and the process stays at its in-step peak
between steps. The trainer's role does this with ``trainer.keep_memory_between_steps``
(the default); with ``false`` it keeps glibc's behaviour and returns the free pages after
each step (trinity/trainer/train_loop.py), which lowers a run's memory peak (the sum of its
processes') by what the trainer holds between steps.
(Keeping the pages but still returning them after each step was slower than either:
the next step faults everything in again, through the heaps' smaller growth steps.)
"""

from __future__ import annotations

import ctypes
import functools
import logging

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's malloc.h

_kept = False  # whether keep_freed_memory changed this process's heap
_told = False  # whether the missing glibc was logged


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library of this process when it is glibc, which has ``mallopt`` and
    ``malloc_trim``; None elsewhere (musl, macOS)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc defines it
    except (OSError, AttributeError):
        return None
    return libc


def _function(name: str, argtypes: tuple, restype):
    """glibc's ``name`` with its C signature, or None without glibc (logged once)."""
    global _told
    libc = _glibc()
    if libc is None:
        if not _told:
            _told = True
            logger.info("no glibc: the heap is left as the C library manages it (%s skipped)", name)
        return None
    function = getattr(libc, name)
    function.argtypes, function.restype = list(argtypes), restype
    return function


def keep_freed_memory() -> bool:
    """Make this process's heap keep freed memory for reuse (process-wide, from now on):
    no block gets its own mapping and no free space is handed back to the OS on its own.
    False without glibc (then nothing changes). Only the processes the launcher starts
    call it (the trainer's actors); importing trinity or building a Trainer never does."""
    global _kept
    mallopt = _function("mallopt", (ctypes.c_int, ctypes.c_int), ctypes.c_int)
    if mallopt is None:
        return False
    # both return 1 on success; with mmap off, a block too big for a thread's heap
    # comes from the main heap (or, if that cannot grow, a mapping after all)
    _kept = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
    return _kept


def keeps_freed_memory() -> bool:
    """Whether :func:`keep_freed_memory` has changed this process's heap."""
    return _kept


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS; False without glibc."""
    trim = _function("malloc_trim", (ctypes.c_size_t,), ctypes.c_int)
    if trim is None:
        return False
    trim(0)
    return True


class TrainerHeap:
    """A trainer process's heap between its steps (``trainer.keep_memory_between_steps``):
    with ``keep`` it keeps what a step frees for the next one from now on; otherwise
    :meth:`after_step` returns the step's freed memory to the OS. Built by the trainer's
    actors (``trinity.launch``), not by :class:`~trinity.trainer.trainer.Trainer`."""

    def __init__(self, keep: bool) -> None:
        self.keeps = keep and keep_freed_memory()

    def after_step(self) -> None:
        """Call when nothing of the step is alive any more."""
        if not self.keeps:
            release_free_memory()
