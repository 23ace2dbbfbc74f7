"""``Experience.teacher_logprobs`` (on-policy distillation) through every experience buffer.

A rollout written by the explorer and read by the trainer must keep the teacher's
per-token log-probs bit for bit, whichever ``storage_type`` lies between them; a
database written before the field existed gains its column and reads it as None.
"""

from __future__ import annotations

import pickle
import sqlite3
from pathlib import Path

import pytest
import torch
from buffer_testing import assert_same_experience, full_experience, storage_config

from trinity.buffer import SQLExperienceStorage, make_experience_buffer
from trinity.buffer.jsonl import JsonlReader, JsonlWriter


def distilled(i: int) -> torch.Tensor:
    # three response tokens, with a value that a float32 -> float64 -> float32 trip keeps
    return torch.tensor([-0.1 - i, -1.0e-9, -12.5], dtype=torch.float32)


def written() -> list:
    exps = [full_experience(i) for i in range(3)]
    for i, exp in enumerate(exps):
        exp.teacher_logprobs = distilled(i)
    exps[2].teacher_logprobs = None  # a rollout without a teacher stays without one
    return exps


def check(read: list, sent: list) -> None:
    assert len(read) == len(sent)
    for a, b in zip(read, sent, strict=True):
        assert_same_experience(a, b)
    assert torch.equal(read[0].teacher_logprobs, distilled(0))
    assert read[2].teacher_logprobs is None


@pytest.mark.parametrize(
    ("storage_type", "backup", "priority"),
    [
        ("queue", None, False),
        ("queue", "backup.db", False),
        ("queue", "backup.jsonl", False),
        ("queue", None, True),
        ("sql", "buffer.db", False),
    ],
)
def test_every_buffer_hands_the_trainer_the_teacher_logprobs(
    tmp_path: Path, storage_type: str, backup: str | None, priority: bool
) -> None:
    path = str(tmp_path / backup) if backup else None
    cfg = storage_config(
        storage_type=storage_type, path=path, max_read_timeout=0.1, use_priority_queue=priority
    )
    buffer = make_experience_buffer(cfg)
    sent = written()
    buffer.put(sent)
    read = buffer.get(3, timeout=0.1)
    if priority:  # a priority queue hands out the newest first
        read = sorted(read, key=lambda e: e.eid.task)
    check(read, sent)
    buffer.close()
    if backup and backup.endswith(".db"):
        stored = SQLExperienceStorage(path)
        check(stored.read(3), sent)
        stored.close()
    if backup and backup.endswith(".jsonl"):
        check(JsonlReader(path).read_new(3), sent)


def test_jsonl_file_round_trip(tmp_path: Path) -> None:
    path = str(tmp_path / "exps.jsonl")
    writer = JsonlWriter(path)
    sent = written()
    writer.write(sent)
    writer.close()
    check(JsonlReader(path).read_new(3), sent)


def test_ray_actor_boundary_keeps_them() -> None:
    # the queue lives in a Ray actor: experiences cross it pickled
    sent = written()
    check(pickle.loads(pickle.dumps(sent)), sent)


def test_a_database_written_before_the_field_gains_its_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    storage = SQLExperienceStorage(str(path))
    old = full_experience(0)
    old.teacher_logprobs = None
    storage.write([old])
    storage.close()
    with sqlite3.connect(path) as conn:  # the table as the schema before the field made it
        conn.execute("ALTER TABLE experience DROP COLUMN teacher_logprobs")
        columns = [row[1] for row in conn.execute("PRAGMA table_info(experience)")]
    assert "teacher_logprobs" not in columns

    storage = SQLExperienceStorage(str(path))
    new = full_experience(1)
    new.teacher_logprobs = distilled(1)
    storage.write([new])
    first, second = storage.read(2)
    storage.close()
    assert_same_experience(first, old)
    assert first.teacher_logprobs is None
    assert torch.equal(second.teacher_logprobs, distilled(1))
