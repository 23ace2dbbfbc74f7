"""Acceptance: a writer killed with SIGKILL mid-write loses at most the batch in flight,
and the storage stays readable and writable for the reader and the next writer."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from trinity.buffer import JsonlReader, SQLExperienceStorage, make_experience_buffer
from trinity.types import EID, Experience

BATCH = 20
FORK = multiprocessing.get_context("fork")


def experience(i: int, length: int = 64) -> Experience:
    return Experience(tokens=torch.arange(length), prompt_length=8, eid=EID(run=i))


def write_forever(cfg: SimpleNamespace, length: int) -> None:
    buffer = make_experience_buffer(cfg)
    i = 0
    while True:
        buffer.put([experience(i + j, length) for j in range(BATCH)])
        i += BATCH


def kill_when(reader, proc, at_least: int) -> list[Experience]:
    """Read until ``at_least`` arrived, SIGKILL the writer, then drain what it committed."""
    received: list[Experience] = []
    deadline = time.monotonic() + 60
    while len(received) < at_least and time.monotonic() < deadline:
        received += reader.get(50, timeout=0.5)
    os.kill(proc.pid, signal.SIGKILL)  # most likely inside a write
    proc.join(10)
    assert proc.exitcode == -signal.SIGKILL
    while batch := reader.get(100, timeout=0.3):
        received += batch
    return received


def assert_nothing_lost_before_the_cut(received: list[Experience], length: int) -> None:
    runs = [e.eid.run for e in received]
    assert runs == list(range(len(runs)))  # nothing missing before the cut, nothing twice
    assert all(e.tokens.tolist() == list(range(length)) for e in received)  # none half-read


def assert_whole_batches(received: list[Experience], length: int) -> None:
    assert_nothing_lost_before_the_cut(received, length)
    assert len(received) % BATCH == 0  # a transaction: the batch in flight is absent entirely


def test_killed_sql_writer(storage_url: str) -> None:
    cfg = SimpleNamespace(storage_type="sql", path=storage_url)
    reader = make_experience_buffer(cfg)
    proc = FORK.Process(target=write_forever, args=(cfg, 64), daemon=True)
    proc.start()
    received = kill_when(reader, proc, at_least=200)
    assert_whole_batches(received, 64)

    if "://" not in storage_url:
        with sqlite3.connect(storage_url) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check = SQLExperienceStorage(storage_url)
    assert check.count() == len(received)  # the reader saw every committed row
    check.close()
    # the next writer is not blocked by anything the dead one held
    make_experience_buffer(cfg).put([experience(len(received))])
    assert [e.eid.run for e in reader.get(5, timeout=2)] == [len(received)]
    reader.close()


def test_killed_file_writer(tmp_path: Path) -> None:
    path = tmp_path / "exps.jsonl"
    cfg = SimpleNamespace(storage_type="file", path=str(path))
    reader = make_experience_buffer(cfg)
    # long lines: a batch is a large write, so the kill often lands inside one
    proc = FORK.Process(target=write_forever, args=(cfg, 4096), daemon=True)
    proc.start()
    received = kill_when(reader, proc, at_least=100)
    # lines are appended one after another: a kill inside a write may leave the whole
    # lines of that batch before the cut (complete experiences), never a half line
    assert_nothing_lost_before_the_cut(received, 4096)

    # the next writer drops a half-written last line, so what it appends stays readable
    make_experience_buffer(cfg).put([experience(len(received), 4096)])
    assert [e.eid.run for e in reader.get(5, timeout=2)] == [len(received)]
    assert len(JsonlReader(path).read_all()) == len(received) + 1
    reader.close()
