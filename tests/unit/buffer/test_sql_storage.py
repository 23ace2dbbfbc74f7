"""SQLExperienceStorage and JSON-lines files: paths, cursors, transactions, crashes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from buffer_testing import assert_same_experience, full_experience

from trinity.buffer import (
    ExperienceCodecError,
    JsonlReader,
    JsonlWriter,
    MalformedRowError,
    SQLExperienceStorage,
    database_url,
)
from trinity.types import Experience


def test_database_url() -> None:
    assert database_url("/data/buf.db") == "sqlite:////data/buf.db"
    assert database_url("rel/buf.db") == f"sqlite:///{os.getcwd()}/rel/buf.db"
    assert database_url("sqlite:///countdown_buffer.db") == "sqlite:///countdown_buffer.db"
    assert database_url("postgresql://u@h/db") == "postgresql://u@h/db"


@pytest.mark.parametrize("as_url", [False, True])
def test_creates_parent_dirs_and_uses_wal(tmp_path: Path, as_url: bool) -> None:
    db = tmp_path / "a" / "b" / "buffer.db"
    storage = SQLExperienceStorage(f"sqlite:///{db}" if as_url else str(db))
    storage.write([full_experience(0)])
    assert db.exists()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    storage.close()


def test_read_offset_read_new_and_count(tmp_path: Path) -> None:
    storage = SQLExperienceStorage(str(tmp_path / "buffer.db"))
    storage.write([full_experience(i) for i in range(5)])
    assert storage.count() == 5
    assert [e.prompt_text for e in storage.read(2, offset=1)] == ["question 1", "question 2"]
    assert [e.prompt_text for e in storage.read_new(3)] == [f"question {i}" for i in range(3)]
    storage.write([full_experience(5)])
    assert [e.prompt_text for e in storage.read_new(10)] == [f"question {i}" for i in (3, 4, 5)]
    assert storage.read_new(10) == []

    # a new process resumes the cursor from the saved state
    state = storage.state_dict()
    storage.write([full_experience(6)])
    storage.close()
    again = SQLExperienceStorage(str(tmp_path / "buffer.db"))
    again.load_state_dict(state)
    [exp] = again.read_new(10)
    assert_same_experience(exp, full_experience(6))
    again.close()


def test_a_batch_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    storage = SQLExperienceStorage(str(tmp_path / "buffer.db"))
    storage.write([full_experience(0)])
    bad = Experience(tokens=torch.tensor([1, 2]), prompt_length=1, info={"x": object()})
    with pytest.raises(ExperienceCodecError, match="'info'"):
        storage.write([full_experience(1), bad])
    assert storage.count() == 1
    storage.close()


def test_tables_by_name_live_side_by_side(tmp_path: Path) -> None:
    url = str(tmp_path / "buffer.db")
    default = SQLExperienceStorage(url)
    sft = SQLExperienceStorage(url, table_name="sft_buffer")
    default.write([full_experience(0)])
    sft.write([full_experience(1), full_experience(2)])
    assert (default.count(), sft.count()) == (1, 2)
    assert sft.read(1)[0].prompt_text == "question 1"
    default.close()
    sft.close()


CRASH_WRITER = """
import sys, torch
from trinity.buffer import SQLExperienceStorage
from trinity.types import Experience
storage = SQLExperienceStorage(sys.argv[1])
print("ready", flush=True)
while True:
    # 20 experiences per transaction
    storage.write([Experience(tokens=torch.arange(64), prompt_length=8) for _ in range(20)])
"""


def test_killed_writer_leaves_whole_batches(tmp_path: Path) -> None:
    db = tmp_path / "buffer.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASH_WRITER, str(db)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        watcher = SQLExperienceStorage(str(db))
        deadline = time.monotonic() + 30
        while watcher.count() < 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        watcher.close()
    finally:
        proc.send_signal(signal.SIGKILL)  # mid-transaction, most likely
        proc.wait()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    storage = SQLExperienceStorage(str(db))
    count = storage.count()
    assert count >= 100 and count % 20 == 0
    assert all(e.tokens.tolist() == list(range(64)) for e in storage.read(count))
    storage.close()


def test_jsonl_reader_cursor_and_partial_last_line(tmp_path: Path) -> None:
    path = tmp_path / "out" / "exps.jsonl"
    writer = JsonlWriter(path)
    writer.write([full_experience(i) for i in range(3)])
    reader = JsonlReader(path)
    assert [e.prompt_text for e in reader.read_new(2)] == ["question 0", "question 1"]
    # a line still being written (no newline yet) is not consumed
    with open(path, "a") as f:
        f.write('{"tokens": ')
    assert [e.prompt_text for e in reader.read_new(5)] == ["question 2"]
    assert reader.read_new(5) == []
    state = reader.state_dict()
    with open(path, "a") as f:
        f.write('{"dtype": "int64"')  # still incomplete
    assert reader.read_new(5) == []
    assert reader.state_dict() == state
    writer.close()


def test_jsonl_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "exps.jsonl"
    with JsonlWriter(path) as writer:
        writer.write([full_experience(0)])
    with open(path, "a") as f:
        f.write('{"prompt_text": "no tokens"}\n')
    with pytest.raises(MalformedRowError, match=rf"{path}, line 2"):
        JsonlReader(path).read_all()


def test_jsonl_writer_drops_a_partial_last_line_left_by_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "exps.jsonl"
    with JsonlWriter(path) as writer:
        writer.write([full_experience(0)])
    whole = path.stat().st_size
    with open(path, "a") as f:
        f.write('{"tokens": {"dtype": "int6')  # what a killed writer leaves
    with JsonlWriter(path) as writer:
        assert path.stat().st_size == whole
        writer.write([full_experience(1)])
    assert [e.prompt_text for e in JsonlReader(path).read_all()] == ["question 0", "question 1"]
    path.write_text('{"no newline at all')
    JsonlWriter(path).close()
    assert path.read_text() == ""
