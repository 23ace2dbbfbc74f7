"""One thread for all of a process's parallel torch work.

PyTorch on the CPU runs parallel ops with OpenMP, and each thread that runs one starts
its own OpenMP thread team. Once a process holds more OpenMP threads than there are
cores, libgomp stops spinning at its barriers, so every small op ends with threads
sleeping on a futex: a trainer step measured ~3.5x slower in wall time (at one core's
CPU use) when its model had been loaded on another thread than the one training it, as
happens in a threaded Ray actor (``__init__`` and methods on different threads). Roles
route their torch work through :func:`on_torch_thread`; the rollout engine has its own
worker thread for the same reason (``trinity.rollout.batcher``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_thread: threading.Thread | None = None


def _remember_thread() -> None:
    global _thread
    _thread = threading.current_thread()


def on_torch_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on the process's torch thread and return its result
    (directly when called from that thread)."""
    global _pool
    if threading.current_thread() is _thread:
        return fn(*args, **kwargs)
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(1, thread_name_prefix="torch", initializer=_remember_thread)
    return _pool.submit(fn, *args, **kwargs).result()


def torch_thread_method(method: Callable[..., T]) -> Callable[..., T]:
    """Decorator: the method always runs on the process's torch thread."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        return on_torch_thread(method, *args, **kwargs)

    return wrapper
