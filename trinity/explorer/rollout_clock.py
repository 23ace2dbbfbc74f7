"""What held the explorer's rollouts up: weight installs during a step, idle gaps between steps.

Two figures per explore step, both measured on the wall clock:

* ``time/wait_weights``: seconds of the step's rollout during which new weights were being
  installed (the engines swap weights between decode batches, so a rollout in flight
  stands still meanwhile); the explore loop adds the time it blocked before the step
  waiting for a policy version (``sync_style`` other than ``fully_async``).
* ``time/explorer_idle``: seconds just before the step's rollout began during which no
  rollout ran on any lane (0 for the first step of a run): the bubble. A loop that waits
  for the trainer between steps shows it here; ``fully_async`` with two or more batches
  in flight starts the next batch while the previous one still rolls out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# installs older than every rollout still running are dropped; this bounds the list for
# a run whose steps never end (an explorer stuck in one step keeps all of its installs)
_KEEP_INSTALLS = 4096


class RolloutClock:
    """Thread-safe record of rollout intervals (one per step, on any lane thread) and of
    weight installs (on the loop's or a watcher's thread)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[int, float] = {}  # step -> start of its rollout
        self._idle_since: float | None = None  # None: no rollout has ended yet
        self._installs: list[tuple[float, float]] = []
        self._done: dict[int, dict[str, float]] = {}

    @contextmanager
    def rolling(self, step: int) -> Iterator[None]:
        """Bracket step ``step``'s rollout."""
        with self._lock:
            start = self._clock()
            idle = 0.0
            if not self._running and self._idle_since is not None:
                idle = start - self._idle_since
            self._running[step] = start
        try:
            yield
        finally:
            with self._lock:
                end = self._clock()
                del self._running[step]
                if not self._running:
                    self._idle_since = end
                self._done[step] = {
                    "time/wait_weights": self._installing_between(start, end),
                    "time/explorer_idle": idle,
                }
                self._forget_old_installs()

    @contextmanager
    def installing(self) -> Iterator[None]:
        """Bracket one install of new weights into the engines."""
        start = self._clock()
        try:
            yield
        finally:
            with self._lock:
                self._installs.append((start, self._clock()))

    def step_metrics(self, step: int) -> dict[str, float]:
        """The figures of step ``step``, whose rollout has ended (once: they are removed)."""
        with self._lock:
            return self._done.pop(step)

    def _installing_between(self, start: float, end: float) -> float:
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in self._installs)

    def _forget_old_installs(self) -> None:
        oldest = min(self._running.values(), default=self._clock())
        self._installs = [span for span in self._installs if span[1] > oldest]
        del self._installs[:-_KEEP_INSTALLS]
