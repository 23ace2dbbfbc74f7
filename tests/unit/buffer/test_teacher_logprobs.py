"""``Experience.teacher_logprobs`` (on-policy distillation) through every experience buffer.

A rollout written by the explorer and read by the trainer must keep the teacher's
per-token log-probs bit for bit, whichever ``storage_type`` lies between them; a
database written before the field existed gains its column and reads it as None.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from buffer_testing import (
    EVERY_BUFFER,
    assert_same_experience,
    full_experience,
    pass_every_buffer,
    written_before_the_column,
)

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


@pytest.mark.parametrize("case", EVERY_BUFFER)
def test_every_buffer_hands_the_trainer_the_teacher_logprobs(tmp_path: Path, case: tuple) -> None:
    sent = written()
    for read in pass_every_buffer(tmp_path, case, sent):
        check(read, sent)


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
    old, new = full_experience(0), full_experience(1)
    old.teacher_logprobs = None
    new.teacher_logprobs = distilled(1)
    first, second = written_before_the_column(tmp_path, "teacher_logprobs", old, new)
    assert_same_experience(first, old)
    assert first.teacher_logprobs is None
    assert torch.equal(second.teacher_logprobs, distilled(1))
