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
each step (trinity/launch/roles.py), which lowers a run's memory peak (the sum of its
processes') by what the trainer holds between steps.
(Keeping the pages but still returning them after each step was slower than either:
the next step faults everything in again, through the heaps' smaller growth steps.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _libc(name: str, argtypes: tuple, restype):
    """glibc's ``name`` with its C signature, or None in other C libraries (musl,
    macOS), where there is nothing to do."""
    path = ctypes.util.find_library("c")
    try:
        function = getattr(ctypes.CDLL(path), name) if path else None
    except (OSError, AttributeError):
        return None
    if function is not None:
        function.argtypes, function.restype = list(argtypes), restype
    return function


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's malloc.h


def keep_freed_memory() -> bool:
    """Make this process's heap keep freed memory for reuse (process-wide, from now on):
    no block gets its own mapping and no free space is handed back to the OS on its own.
    False where the C library has no ``mallopt`` (then nothing changes)."""
    mallopt = _libc("mallopt", (ctypes.c_int, ctypes.c_int), ctypes.c_int)
    if mallopt is None:
        return False
    # both return 1 on success; with mmap off, a block too big for a thread's heap
    # comes from the main heap (or, if that cannot grow, a mapping after all)
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS; False where the C library cannot."""
    trim = _libc("malloc_trim", (ctypes.c_size_t,), ctypes.c_int)
    if trim is None:
        return False
    trim(0)
    return True


class TrainerHeap:
    """A trainer process's heap between its steps (``trainer.keep_memory_between_steps``):
    with ``keep`` it keeps what a step frees for the next one from now on; otherwise
    :meth:`after_step` returns the step's freed memory to the OS."""

    def __init__(self, keep: bool) -> None:
        self.keeps = keep and keep_freed_memory()

    def after_step(self) -> None:
        """Call when nothing of the step is alive any more."""
        if not self.keeps:
            release_free_memory()
