"""``Experience.temperature`` (the temperature its log-probs were sampled at) through
every experience buffer.

The trainer recomputes each row's log-probs at that temperature, so a rollout written
by the explorer must reach the trainer with it, whichever ``storage_type`` lies between
them; a row written before the field existed reads None (the trainer then falls back to
the configured temperature), and a database of that time gains the column.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from buffer_testing import (
    EVERY_BUFFER,
    assert_same_experience,
    full_experience,
    pass_every_buffer,
    written_before_the_column,
)

from trinity.buffer.codec import experience_from_dict, experience_to_dict

# 0.3 is no float32: the value must come back as the same Python float
TEMPERATURES = [1.0, 0.3, None]


def written() -> list:
    exps = [full_experience(i) for i in range(3)]
    for exp, temperature in zip(exps, TEMPERATURES, strict=True):
        exp.temperature = temperature
    return exps


def check(read: list, sent: list) -> None:
    assert len(read) == len(sent)
    for a, b in zip(read, sent, strict=True):
        assert_same_experience(a, b)
    assert [e.temperature for e in read] == TEMPERATURES


@pytest.mark.parametrize("case", EVERY_BUFFER)
def test_every_buffer_hands_the_trainer_the_temperature(tmp_path: Path, case: tuple) -> None:
    sent = written()
    for read in pass_every_buffer(tmp_path, case, sent):
        check(read, sent)


def test_a_json_line_written_before_the_field_reads_none() -> None:
    line = experience_to_dict(full_experience(0))
    line.pop("temperature")
    assert experience_from_dict(line).temperature is None


def test_a_database_written_before_the_field_gains_its_column(tmp_path: Path) -> None:
    old, new = full_experience(0), full_experience(1)
    old.temperature, new.temperature = None, 0.3
    first, second = written_before_the_column(tmp_path, "temperature", old, new)
    assert_same_experience(first, old)
    assert first.temperature is None
    assert second.temperature == 0.3
