"""Merge requests from many threads into batches run by one worker thread.

Callers ``submit`` items and get futures back. The worker takes the first waiting item,
keeps collecting items for ``window_s`` (or until ``max_size`` would be exceeded), and
hands the whole list to ``run_batch``, which returns one result per item. While a batch
runs, new items queue up and form the next batch, so a busy engine batches by itself
and the window only matters when it is idle.

A running batch may take in items that queued after it started (``take_waiting``: the
engine's continuous batching refills slots that finished rows freed) and resolve any of
its items' futures early; ``run_batch`` then returns ``DELIVERED`` for those.

An item whose future was cancelled while it waited is left out of its batch (the
engine also stops decoding the rows of a request cancelled mid-batch).

``call`` runs any other function on the same worker thread, between batches. A process
whose heavy torch work all happens on one thread keeps one OpenMP thread team: a second
thread running parallel torch ops (loading weights, scoring) creates a second team, and
with more OpenMP threads than cores libgomp stops spinning at its barriers, which made
every small op of a decode step wait on a futex (decoding measured 1.3-2x slower).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

Item = TypeVar("Item")
# a result of ``run_batch`` saying that it resolved the item's future itself (as soon as
# that item was done, before the rest of its batch)
DELIVERED = object()
Result = TypeVar("Result")


class _Call:
    """A function queued to run alone on the worker thread."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn


class RequestBatcher(Generic[Item, Result]):
    """A worker thread that runs ``run_batch`` over merged submissions.

    Args:
        run_batch: runs a list of items, returns their results in the same order.
        size_of: how much of ``max_size`` an item takes (e.g. sequences it decodes).
        max_size: most total size merged into one batch (a bigger item runs alone).
        window_s: how long to wait for more items after the first one arrives.
        on_start: called once in the worker thread before the first batch.
    """

    def __init__(
        self,
        run_batch: Callable[[list[Item]], list[Result]],
        size_of: Callable[[Item], int],
        max_size: int,
        window_s: float,
        on_start: Callable[[], None] | None = None,
        name: str = "batcher",
    ) -> None:
        self._run_batch = run_batch
        self._size_of = size_of
        self.max_size = max_size  # may be changed later; read at each batch
        self._window_s = window_s
        self._on_start = on_start
        self._queue: queue.Queue[tuple[Item, Future] | None] = queue.Queue()
        # the entry taken from the queue that opens the next batch (at most one)
        self._carry: list[tuple[Item, Future] | None] = []
        self._closed = False
        self._closing = threading.Lock()  # orders submit() against close()
        self._worker = threading.Thread(target=self._serve, name=name, daemon=True)
        self._worker.start()

    def submit(self, item: Item, future: Future | None = None) -> Future:
        """Queue an item; the future (``future``, or a new one) resolves to its result (or
        its batch's error)."""
        future = Future() if future is None else future
        with self._closing:
            if self._closed:
                raise RuntimeError("The engine is closed; create a new one.")
            self._queue.put((item, future))
        return future

    def call(self, fn: Callable[[], object]) -> object:
        """Run ``fn()`` on the worker thread after what is queued; return its result."""
        if threading.current_thread() is self._worker:
            return fn()
        return self.submit(_Call(fn)).result()

    def take_waiting(self, max_size: int) -> list[tuple[Item, Future]]:
        """Items queued now, taken into the batch that is running (call it from
        ``run_batch``, on the worker thread): up to ``max_size`` in all (the first one
        whatever its size), without waiting, and none queued after a ``call`` or a
        ``close``. Their futures are the caller's to resolve."""
        taken: list[tuple[Item, Future]] = []
        size = 0
        while size < max_size:
            if self._carry:
                entry = self._carry.pop()
            else:
                try:
                    entry = self._queue.get_nowait()
                except queue.Empty:
                    break
            if (
                entry is None
                or isinstance(entry[0], _Call)
                or (taken and size + self._size_of(entry[0]) > max_size)
            ):
                self._carry.append(entry)  # a weight swap, the end, or the next batch
                break
            if not entry[1].cancelled():
                taken.append(entry)
                size += self._size_of(entry[0])
        return taken

    def close(self) -> None:
        """Serve what is queued, then stop the worker."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)
        self._worker.join()

    def _serve(self) -> None:
        if self._on_start is not None:
            self._on_start()
        stopping = False
        while not stopping:
            first = self._carry.pop() if self._carry else self._queue.get()
            if first is None:
                break
            if isinstance(first[0], _Call):
                self._call(*first)
                continue
            if first[1].cancelled():  # its caller left while it waited
                continue
            batch, size = [first], self._size_of(first[0])
            deadline = time.monotonic() + self._window_s
            while size < self.max_size:
                try:
                    entry = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if entry is None:
                    stopping = True
                    break
                if isinstance(entry[0], _Call) or size + self._size_of(entry[0]) > self.max_size:
                    self._carry.append(entry)  # opens the next batch
                    break
                if entry[1].cancelled():
                    continue
                batch.append(entry)
                size += self._size_of(entry[0])
            self._run(batch)

    @staticmethod
    def _call(call: _Call, future: Future) -> None:
        try:
            result = call.fn()
        except BaseException as error:  # handed to the caller, who re-raises it
            future.set_exception(error)
        else:
            future.set_result(result)

    def _run(self, batch: list[tuple[Item, Future]]) -> None:
        try:
            results = self._run_batch([item for item, _ in batch])
        except Exception as error:
            logger.exception("batch of %d requests failed", len(batch))
            for _, future in batch:
                if not future.done() and future.set_running_or_notify_cancel():
                    future.set_exception(error)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if result is DELIVERED:
                continue
            # a caller may have cancelled its future, even between the check and the set
            if future.set_running_or_notify_cancel():
                future.set_result(result)
