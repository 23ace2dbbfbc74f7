"""The priority experience queue (``storage_type: queue`` with ``use_priority_queue``).

Readers get the highest-priority experiences first instead of the oldest. The
priority of an experience falls with the age of the policy that sampled it and with
the number of times it was already read::

    priority = model_version - use_count_weight * use_count

(the age is ``newest_version - model_version``; the newest version is the same for
every held experience, so ordering by ``model_version`` is ordering by freshness).
Equal priorities are read in the order they were put. With ``priority_sigma`` > 0
(``decay_limit_randomization``) each insertion adds Gaussian noise N(0, sigma^2) to
that priority, drawn once per insertion, so experiences of similar priority are
read in a shuffled order.

Reuse (``reuse_cooldown_time``):

- ``None``: an experience is read at most once, as in the FIFO queue;
- ``t`` seconds: after being read, an experience stays in the queue with
  ``use_count + 1`` and can be read again once ``t`` seconds have passed; with
  ``use_count_limit`` k > 0 (``decay_limit_randomization``) it leaves the queue after
  its k-th read instead. Each read returns a copy whose ``info["use_count"]`` is the
  number of earlier reads (0 the first time).

The queue never blocks a writer: when a put would exceed ``capacity``, the
lowest-priority experiences (stale or much reused) are evicted and counted in
``evicted``. ``close`` stops puts and reuse: readers then drain the experiences that
are ready, experiences still cooling down are dropped, and ``QueueClosed`` follows.

With a backup the queue is persistent: ``state_dict`` names the experiences it holds by
their place in the backup (row id or byte offset), with their read counts and remaining
cooldowns, and ``load_state_dict`` reads them back into a new queue (a resumed run).
"""

from __future__ import annotations

import bisect
import copy
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trinity.buffer.errors import QueueClosed
from trinity.buffer.queue import ExperienceWriter
from trinity.buffer.superseded import Superseded
from trinity.types import Experience


@dataclass
class _Entry:
    exp: Experience
    seq: int  # put order; breaks ties between equal priorities
    use_count: int = 0
    ready_at: float = 0.0  # clock time from which it may be read
    key: tuple[float, int] = field(default=(0.0, 0))
    stored_at: int | None = None  # its place in the backup (row id or byte offset)


class PriorityExperienceQueue:
    """Thread-safe priority queue of experiences with optional reuse after a cooldown."""

    def __init__(
        self,
        capacity: int = 10000,
        backup: ExperienceWriter | None = None,
        reuse_cooldown_time: float | None = None,
        read_timeout: float | None = None,
        use_count_weight: float = 1.0,
        use_count_limit: int = 0,
        priority_sigma: float = 0.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"queue capacity must be >= 1, got {capacity}")
        if reuse_cooldown_time is not None and reuse_cooldown_time < 0:
            raise ValueError(f"reuse_cooldown_time must be >= 0 or None, got {reuse_cooldown_time}")
        if use_count_limit < 0:
            raise ValueError(f"use_count_limit must be >= 0 (0: no limit), got {use_count_limit}")
        if priority_sigma < 0:
            raise ValueError(f"priority_sigma must be >= 0, got {priority_sigma}")
        self.capacity = capacity
        self.backup = backup
        self.reuse_cooldown_time = reuse_cooldown_time
        self.read_timeout = read_timeout
        self.use_count_weight = use_count_weight
        self.use_count_limit = use_count_limit  # reads per experience; 0: no limit
        self.priority_sigma = priority_sigma  # std of the noise added at each insertion
        self._rng = rng or random.Random()
        self.evicted = 0  # experiences dropped to stay within capacity
        self._clock = clock
        # ascending by (priority, -seq): the best entry is last, the worst first
        self._entries: list[_Entry] = []
        self._keys: list[tuple[float, int]] = []
        self._seq = 0
        self._closed = False
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._put_lock = threading.Lock()  # backup order = queue order

    def put(self, exps: list[Experience]) -> None:
        """Add ``exps`` (never blocks); evicts the lowest priorities beyond ``capacity``."""
        exps = list(exps)
        if not exps:
            return
        with self._put_lock:
            self._check_open()
            stored_at = self.backup.write(exps) if self.backup is not None else None
            with self._lock:
                self._check_open()
                for i, exp in enumerate(exps):
                    where = stored_at[i] if stored_at else None
                    self._insert(_Entry(exp=exp, seq=self._seq, stored_at=where))
                    self._seq += 1
                self._evict_overflow()
                self._changed.notify_all()

    def get(self, n: int, timeout: float | None = None) -> list[Experience]:
        """Up to ``n`` experiences, highest priority first.

        Waits until ``n`` are ready, ``timeout`` (default: ``read_timeout``; ``None``
        waits forever) passes, or the queue is closed; then returns what is ready,
        possibly ``[]``. Raises QueueClosed once closed and nothing is ready.
        """
        if n < 1:
            raise ValueError(f"get needs n >= 1, got {n}")
        timeout = self.read_timeout if timeout is None else timeout
        deadline = None if timeout is None else self._clock() + timeout
        wanted = min(n, self.capacity)
        with self._lock:
            while True:
                now = self._clock()
                ready = self._ready_count(now)
                if ready >= wanted or self._closed:
                    break
                remaining = None if deadline is None else deadline - now
                if remaining is not None and remaining <= 0:
                    break
                wake = self._next_ready_at(now)
                if wake is not None:
                    remaining = wake - now if remaining is None else min(remaining, wake - now)
                self._changed.wait(remaining)
            out = self._take(n, self._clock())
            if self._closed and not out:
                raise QueueClosed("the experience queue is closed and empty")
            return out

    def qsize(self) -> int:
        """Experiences held, including those cooling down."""
        with self._lock:
            return len(self._entries)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop puts and reuse, wake all waiters, and close the backup."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()
        with self._put_lock:
            if self.backup is not None:
                self.backup.close()

    def state_dict(self) -> dict[str, Any] | None:
        """What the queue holds, as places in its backup with each one's read count and
        remaining cooldown; None without a backup, which alone can bring them back."""
        if self.backup is None or not hasattr(self.backup, "read_at"):
            return None
        with self._lock:
            now = self._clock()
            held = sorted(self._entries, key=lambda e: e.seq)
            return {
                "held": [
                    [e.stored_at, e.use_count, max(0.0, e.ready_at - now)]
                    for e in held
                    if e.stored_at is not None
                ]
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Hold again what ``state`` names, read back from the backup (before any put)."""
        if self.backup is None or not hasattr(self.backup, "read_at"):
            raise ValueError("a priority queue without a backup (path) cannot load a state")
        held = state["held"]
        found = self.backup.read_at([where for where, _, _ in held])
        with self._lock:
            now = self._clock()
            for where, use_count, cooldown in held:
                if where in found:
                    entry = _Entry(found[where], self._seq, use_count, now + cooldown)
                    entry.stored_at = where
                    self._insert(entry)
                    self._seq += 1
            self._evict_overflow()
            self._changed.notify_all()

    def discard_stored(self, after_step: int | None) -> None:
        """Drop the held experiences of explore steps after ``after_step`` (None: all):
        a resumed explorer puts them again."""
        skip = Superseded(end=sys.maxsize, step=after_step)
        with self._lock:
            self._entries = [e for e in self._entries if not skip.skips(0, e.exp.eid.batch)]
            self._keys = [e.key for e in self._entries]

    def _evict_overflow(self) -> None:
        overflow = len(self._entries) - self.capacity
        if overflow > 0:
            del self._entries[:overflow]
            del self._keys[:overflow]
            self.evicted += overflow

    def _priority(self, entry: _Entry) -> float:
        priority = entry.exp.model_version - self.use_count_weight * entry.use_count
        if self.priority_sigma > 0:
            priority += self._rng.gauss(0.0, self.priority_sigma)
        return priority

    def _insert(self, entry: _Entry) -> None:
        entry.key = (self._priority(entry), -entry.seq)
        i = bisect.bisect_left(self._keys, entry.key)
        self._keys.insert(i, entry.key)
        self._entries.insert(i, entry)

    def _ready_count(self, now: float) -> int:
        return sum(1 for e in self._entries if e.ready_at <= now)

    def _next_ready_at(self, now: float) -> float | None:
        return min((e.ready_at for e in self._entries if e.ready_at > now), default=None)

    def _take(self, n: int, now: float) -> list[Experience]:
        taken: list[_Entry] = []
        i = len(self._entries) - 1
        while i >= 0 and len(taken) < n:
            if self._entries[i].ready_at <= now:
                taken.append(self._entries.pop(i))
                self._keys.pop(i)
            i -= 1
        if self.reuse_cooldown_time is None or self._closed:
            return [entry.exp for entry in taken]
        out = []
        for entry in taken:
            # a copy per read: a reader that reassigns fields does not change the held one;
            # its info counts the earlier reads (the trainer's batch/replayed)
            exp = copy.copy(entry.exp)
            exp.info = {**entry.exp.info, "use_count": entry.use_count}
            out.append(exp)
            entry.use_count += 1
            if self.use_count_limit and entry.use_count >= self.use_count_limit:
                continue  # read use_count_limit times: not put back
            entry.ready_at = now + self.reuse_cooldown_time
            self._insert(entry)
        return out

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosed("cannot put into a closed experience queue")
