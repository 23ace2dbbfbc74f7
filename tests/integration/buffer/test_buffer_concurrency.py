"""Acceptance: several writers and one reader pass 10,000 experiences through the queue
and through SQL storage; none is lost, none is duplicated, each writer's order is kept.

The queue runs in one process (as in its Ray actor: writer calls on threads); the SQL
writers are separate processes, like explorer runners on other machines.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from trinity.buffer import (
    ExperienceQueue,
    PriorityExperienceQueue,
    SQLExperienceStorage,
    make_experience_buffer,
)
from trinity.types import EID, Experience

TOTAL = 10_000
WRITERS = 4
BATCH = 25


def experience(writer: int, i: int) -> Experience:
    return Experience(
        tokens=torch.tensor([writer, i, 7, 8]), prompt_length=2, eid=EID(task=writer, run=i)
    )


def check_complete(received: list[Experience]) -> None:
    keys = [(e.eid.task, e.eid.run) for e in received]
    per_writer = TOTAL // WRITERS
    assert len(keys) == TOTAL, f"received {len(keys)} of {TOTAL}"
    assert set(keys) == {(w, i) for w in range(WRITERS) for i in range(per_writer)}
    for w in range(WRITERS):
        assert [i for t, i in keys if t == w] == list(range(per_writer)), f"writer {w} out of order"
    for e in received:  # payload intact
        assert e.tokens.tolist() == [e.eid.task, e.eid.run, 7, 8]


def read_all(buffer, deadline_s: float = 60) -> list[Experience]:
    received: list[Experience] = []
    deadline = time.monotonic() + deadline_s
    while len(received) < TOTAL and time.monotonic() < deadline:
        received += buffer.get(64, timeout=1.0)
    return received


@pytest.mark.parametrize("kind", ["fifo", "priority"])
def test_queue_passes_10000_from_writer_threads(tmp_path: Path, kind: str) -> None:
    backup = SQLExperienceStorage(str(tmp_path / "backup.db"))
    if kind == "fifo":
        queue = ExperienceQueue(capacity=256, backup=backup)  # small: writers block often
    else:
        queue = PriorityExperienceQueue(capacity=TOTAL, backup=backup)
    per_writer = TOTAL // WRITERS

    def write(w: int) -> None:
        for start in range(0, per_writer, BATCH):
            queue.put([experience(w, i) for i in range(start, start + BATCH)])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    received = read_all(queue)
    for t in threads:
        t.join(10)
    # every experience has model_version 0, so the priority queue keeps put order too
    check_complete(received)
    assert queue.get(1, timeout=0.05) == []
    queue.close()
    stored = SQLExperienceStorage(str(tmp_path / "backup.db"))
    assert stored.count() == TOTAL
    stored.close()


def write_process(url: str, writer: int, count: int) -> None:
    """One explorer runner: its own process and connection, batches of BATCH."""
    buffer = make_experience_buffer(SimpleNamespace(storage_type="sql", path=url))
    for start in range(0, count, BATCH):
        buffer.put([experience(writer, i) for i in range(start, start + BATCH)])
    buffer.close()


# fork: the writers start at once instead of importing torch again each
FORK = multiprocessing.get_context("fork")


@pytest.mark.slow  # 8-15 s: 400 transactions, fsync'ed, from 4 processes
def test_sql_passes_10000_from_writer_processes(storage_url: str) -> None:
    reader = make_experience_buffer(SimpleNamespace(storage_type="sql", path=storage_url))
    procs = [
        FORK.Process(target=write_process, args=(storage_url, w, TOTAL // WRITERS))
        for w in range(WRITERS)
    ]
    for p in procs:
        p.start()
    try:
        received = read_all(reader, deadline_s=120)
    finally:
        for p in procs:
            p.join(60)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    check_complete(received)
    assert reader.get(1, timeout=0.1) == []
    reader.close()


def open_storage(url: str, barrier) -> None:
    barrier.wait()  # all processes create the table at the same moment
    SQLExperienceStorage(url).close()


def test_writers_starting_together_all_open_the_table(storage_url: str) -> None:
    for _ in range(3):
        barrier = FORK.Barrier(6)
        procs = [FORK.Process(target=open_storage, args=(storage_url, barrier)) for _ in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * 6
        storage = SQLExperienceStorage(storage_url)
        with storage.engine.begin() as conn:  # next round races on a missing table again
            storage.model.__table__.drop(conn)
        storage.close()
