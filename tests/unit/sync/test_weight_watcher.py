"""``fully_async``'s weight watcher: new weights are taken while the loop goes on, and a
failure reaches the loop instead of leaving the policy frozen."""

from __future__ import annotations

import logging
import threading

import pytest

from trinity.sync.watcher import WeightWatcher


def test_takes_each_new_version_without_the_loop_asking() -> None:
    published = iter([None, (1, "weights 1"), None, (2, "weights 2")])
    taken: list[tuple[int, str]] = []
    both = threading.Event()

    def take(fetched: tuple[int, str] | None) -> None:
        if fetched is not None:
            taken.append(fetched)
        if len(taken) == 2:
            both.set()

    watcher = WeightWatcher(lambda: next(published, None), take, logging.getLogger(), 0.01)
    watcher.start()
    assert both.wait(5)
    watcher.stop()
    watcher.check()  # no failure
    assert taken == [(1, "weights 1"), (2, "weights 2")]


def test_a_failure_is_raised_in_the_loop() -> None:
    def fetch() -> None:
        raise OSError("weight slot unreadable")

    watcher = WeightWatcher(fetch, lambda fetched: None, logging.getLogger(), 0.01)
    watcher.start()
    watcher._thread.join(5)  # it stops at its first failure
    with pytest.raises(RuntimeError, match="taking new policy weights failed") as err:
        watcher.check()
    assert isinstance(err.value.__cause__, OSError)
    watcher.stop()
