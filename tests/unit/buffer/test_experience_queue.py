"""ExperienceQueue: order, timeouts, capacity, close, concurrency, backups."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from buffer_testing import wait_until_blocked

from trinity.buffer import (
    ExperienceQueue,
    JsonlReader,
    JsonlWriter,
    QueueClosed,
    SQLExperienceStorage,
    open_backup,
)
from trinity.types import EID, Experience


def exp(task: int, run: int = 0) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, eid=EID(task=task, run=run))


def tasks(exps: list[Experience]) -> list[int | str]:
    return [e.eid.task for e in exps]


def start(target, *args) -> tuple[threading.Thread, dict]:
    """Run ``target(*args)`` in a thread; its result or exception lands in the dict."""
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = target(*args)
        except Exception as exc:  # handed to the test thread, which asserts on it
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_fifo_order() -> None:
    q = ExperienceQueue(capacity=10)
    q.put([exp(0), exp(1), exp(2)])
    q.put([exp(3)])
    assert q.qsize() == 4
    assert tasks(q.get(3)) == [0, 1, 2]
    assert tasks(q.get(1)) == [3]
    assert q.qsize() == 0


def test_timeout_returns_an_incomplete_batch() -> None:
    q = ExperienceQueue()
    q.put([exp(0), exp(1), exp(2)])
    began = time.monotonic()
    assert tasks(q.get(5, timeout=0.2)) == [0, 1, 2]
    assert time.monotonic() - began >= 0.2
    assert q.get(5, timeout=0.05) == []


def test_get_waits_for_the_full_batch() -> None:
    q = ExperienceQueue()
    q.put([exp(0), exp(1)])
    thread, box = start(q.get, 4)
    wait_until_blocked(thread)  # 2 of 4 are there: it waits
    q.put([exp(2), exp(3), exp(4)])
    thread.join(5)
    assert tasks(box["result"]) == [0, 1, 2, 3]
    assert q.qsize() == 1


def test_put_blocks_while_full() -> None:
    q = ExperienceQueue(capacity=4)
    q.put([exp(i) for i in range(4)])
    thread, box = start(q.put, [exp(4), exp(5)])
    wait_until_blocked(thread)
    assert q.qsize() == 4
    assert tasks(q.get(1)) == [0]
    wait_until_blocked(thread)
    assert q.qsize() == 3  # one free slot is not room for a batch of two
    assert tasks(q.get(1)) == [1]
    thread.join(5)
    assert not thread.is_alive() and "error" not in box
    assert tasks(q.get(10, timeout=0)) == [2, 3, 4, 5]


def test_batch_larger_than_capacity_goes_in_pieces() -> None:
    q = ExperienceQueue(capacity=3)
    thread, _ = start(q.put, [exp(i) for i in range(7)])
    # asking for more than capacity returns as soon as the queue is full
    assert tasks(q.get(5)) == [0, 1, 2]
    assert tasks(q.get(5)) == [3, 4, 5]
    thread.join(5)
    assert tasks(q.get(5, timeout=0.05)) == [6]


def test_close_wakes_readers_with_what_is_left() -> None:
    q = ExperienceQueue()
    q.put([exp(0)])
    thread, box = start(q.get, 5)
    wait_until_blocked(thread)
    q.close()
    thread.join(5)
    assert tasks(box["result"]) == [0]
    with pytest.raises(QueueClosed):
        q.get(1, timeout=1)
    with pytest.raises(QueueClosed):
        q.put([exp(1)])


def test_close_wakes_blocked_writers() -> None:
    q = ExperienceQueue(capacity=1)
    q.put([exp(0)])
    thread, box = start(q.put, [exp(1)])
    wait_until_blocked(thread)
    q.close()
    thread.join(5)
    assert isinstance(box["error"], QueueClosed)
    assert tasks(q.get(5)) == [0]  # drained after close


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="capacity"):
        ExperienceQueue(capacity=0)
    with pytest.raises(ValueError, match="n >= 1"):
        ExperienceQueue().get(0)


@pytest.mark.parametrize("backup_kind", ["sqlite", "jsonl"])
def test_concurrent_writers_lose_and_duplicate_nothing(tmp_path: Path, backup_kind: str) -> None:
    writers, per_writer, batch = 4, 500, 5
    if backup_kind == "sqlite":
        backup = SQLExperienceStorage(str(tmp_path / "backup.db"))
    else:
        backup = JsonlWriter(tmp_path / "backup.jsonl")
    q = ExperienceQueue(capacity=64, backup=backup)  # small: writers block often

    def write(w: int) -> None:
        for start_i in range(0, per_writer, batch):
            q.put([exp(task=w, run=i) for i in range(start_i, start_i + batch)])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    received: list[Experience] = []
    deadline = time.monotonic() + 60
    while len(received) < writers * per_writer and time.monotonic() < deadline:
        received += q.get(7, timeout=1)
    for t in threads:
        t.join(5)

    keys = [(e.eid.task, e.eid.run) for e in received]
    assert len(keys) == writers * per_writer
    assert set(keys) == {(w, i) for w in range(writers) for i in range(per_writer)}
    for w in range(writers):  # each writer's experiences arrive in the order it put them
        assert [i for (t, i) in keys if t == w] == list(range(per_writer))
    assert q.get(1, timeout=0.05) == []

    q.close()
    if backup_kind == "sqlite":
        store = SQLExperienceStorage(str(tmp_path / "backup.db"))
        stored = store.read(10**6)
        store.close()
    else:
        stored = JsonlReader(tmp_path / "backup.jsonl").read_all()
    # the backup holds everything, in the order it entered the queue
    assert [(e.eid.task, e.eid.run) for e in stored] == keys


def test_open_backup_picks_the_storage_by_path(tmp_path: Path) -> None:
    jsonl = open_backup(str(tmp_path / "b.jsonl"))
    sql = open_backup(str(tmp_path / "b.db"))
    url = open_backup(f"sqlite:///{tmp_path}/c.db")
    assert isinstance(jsonl, JsonlWriter)
    assert isinstance(sql, SQLExperienceStorage) and isinstance(url, SQLExperienceStorage)
    for b in (jsonl, sql, url):
        b.close()
