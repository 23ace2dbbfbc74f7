"""``sync_style: fully_async``: take each published policy version as soon as it appears.

A background thread of the explorer polls for a version newer than the engines' and
installs it; the engines swap weights between decode batches, so rollouts in flight go on
and their next model call samples with the new weights (each sample records the version
that produced it). The explore loop itself never waits for weights.

A failure is kept and raised in the explore loop at its next :meth:`WeightWatcher.check`,
which stops the run: a watcher that went on silently would leave the policy frozen.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from trinity.sync.weights import POLL_S


class WeightWatcher:
    """Calls ``take(fetch())`` every ``poll_s`` seconds on a thread of its own.

    ``fetch`` returns new weights or None (``WeightReceiver.newest`` of the engines'
    version); ``take`` installs them.
    """

    def __init__(
        self,
        fetch: Callable[[], Any],
        take: Callable[[Any], None],
        logger: logging.Logger,
        poll_s: float = POLL_S,
    ) -> None:
        self.fetch = fetch
        self.take = take
        self.logger = logger
        self.poll_s = poll_s
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="weight-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; returns once a weight load in progress has ended."""
        self._stop.set()
        self._thread.join()

    def check(self) -> None:
        """Raise the watcher's failure, if it had one, in the caller's thread."""
        if self.error is not None:
            raise RuntimeError("taking new policy weights failed") from self.error

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.take(self.fetch())
            except BaseException as error:  # raised in the explore loop by check()
                self.logger.exception("taking new policy weights failed; the run stops")
                self.error = error
                return
