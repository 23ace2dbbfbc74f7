"""ExperienceModel and the JSON codec: exact round trips without pickle."""

from __future__ import annotations

import json
import math
import sqlite3
import struct
import tempfile
from pathlib import Path

import pytest
import torch
from buffer_testing import DTYPES, assert_same_experience, experiences, full_experience
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trinity.buffer import (
    ExperienceCodecError,
    JsonlReader,
    JsonlWriter,
    SQLExperienceStorage,
    experience_from_dict,
    experience_to_dict,
)
from trinity.buffer.codec import tensor_from_bytes, tensor_to_bytes
from trinity.common.schema.sql_schema import ExperienceModel
from trinity.types import Experience


def test_model_round_trip_keeps_every_field() -> None:
    exp = full_experience(3)
    row = ExperienceModel.from_experience(exp)
    assert row.model_version == 7  # copied out of info for queries
    assert row.tensor_meta["advantages"] == {"dtype": "bfloat16", "shape": [3]}
    assert row.tensor_meta["rejected"] == {"dtype": "int16", "shape": [2, 2]}
    assert_same_experience(ExperienceModel.to_experience(row), exp)


def test_unset_optional_fields_round_trip() -> None:
    exp = Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1)
    back = ExperienceModel.from_experience(exp).to_experience()
    assert_same_experience(back, exp)
    assert back.logprobs is None and back.reward is None and back.messages is None
    assert back.action_mask.tolist() == [True, True]  # filled by Experience itself


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (0, 4)], ids=str)
def test_tensor_bytes_codec(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    # values -1, 0, 1, -1, ... (True/False for bool)
    tensor = (torch.arange(math.prod(shape)) % 3 - 1).to(dtype).reshape(shape)
    data, meta = tensor_to_bytes(tensor)
    assert len(data) == tensor.numel() * tensor.element_size()
    back = tensor_from_bytes(data, meta)
    assert back.dtype == dtype and back.shape == tensor.shape
    assert torch.equal(back, tensor)


def test_stored_bytes_are_little_endian_and_readable_without_python(tmp_path: Path) -> None:
    db = tmp_path / "buffer.db"
    storage = SQLExperienceStorage(str(db))
    storage.write([full_experience(0)])
    storage.close()
    with sqlite3.connect(db) as conn:
        tokens, meta, reward, batch = conn.execute(
            "SELECT tokens, tensor_meta, reward, eid_batch FROM experience"
        ).fetchone()
    assert tokens == struct.pack("<5q", 101, 7, 8, 9000, 2)
    assert json.loads(meta)["tokens"] == {"dtype": "int64", "shape": [5]}
    assert reward == 0.5
    assert json.loads(batch) == "eval_0"


def test_non_json_info_is_refused_with_the_field_name() -> None:
    exp = Experience(tokens=torch.tensor([1, 2]), prompt_length=1, info={"t": torch.ones(2)})
    with pytest.raises(ExperienceCodecError, match="'info'"):
        ExperienceModel.from_experience(exp)
    with pytest.raises(ExperienceCodecError, match="'info'"):
        experience_to_dict(exp)


def test_nan_reward_is_refused_not_turned_into_null() -> None:
    exp = Experience(tokens=torch.tensor([1, 2]), prompt_length=1, reward=float("nan"))
    with pytest.raises(ExperienceCodecError, match="NaN reward"):
        ExperienceModel.from_experience(exp)


def test_unsupported_dtype_is_refused() -> None:
    exp = Experience(tokens=torch.tensor([1, 2]), prompt_length=1, logprobs=torch.ones(1) * 1j)
    with pytest.raises(ExperienceCodecError, match="complex64"):
        ExperienceModel.from_experience(exp)


def test_faq_snippet_reads_a_database_written_by_the_storage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "sub" / "gsm8k.db"
    storage = SQLExperienceStorage(str(db))
    storage.write([full_experience(i) for i in range(6)])
    storage.close()

    # the FAQ's script, with the config path replaced by the file above
    from sqlalchemy import create_engine
    from sqlalchemy.exc import OperationalError  # noqa: F401
    from sqlalchemy.orm import sessionmaker
    from sqlalchemy.pool import NullPool  # noqa: F401

    from trinity.common.schema.sql_schema import ExperienceModel

    engine = create_engine(f"sqlite:///{db}")
    session = sessionmaker(bind=engine)
    sess = session()

    MAX_EXPERIENCES = 4
    experiences = sess.query(ExperienceModel).limit(MAX_EXPERIENCES).all()

    exp_list = []
    for exp in experiences:
        exp_list.append(ExperienceModel.to_experience(exp))

    # Print the experiences
    for exp in exp_list:
        print(f"{exp.prompt_text=}", f"{exp.response_text=}")
    sess.close()
    engine.dispose()

    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"exp.prompt_text='question {i}' exp.response_text='answer {i} \u00e9\u4e2d'"
        for i in range(4)
    ]
    for i, exp in enumerate(exp_list):
        assert_same_experience(exp, full_experience(i))


# ---- property tests: any experience survives SQLite and JSON lines exactly ----

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.lists(experiences(), min_size=1, max_size=3))
def test_sqlite_round_trip_property(exps: list[Experience]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        storage = SQLExperienceStorage(f"{tmp}/buffer.db")
        storage.write(exps)
        back = storage.read(len(exps) + 1)
        storage.close()
    assert len(back) == len(exps)
    for a, b in zip(back, exps, strict=True):
        assert_same_experience(a, b)


@PROPERTY
@given(st.lists(experiences(), min_size=1, max_size=3))
def test_jsonl_round_trip_property(exps: list[Experience]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        with JsonlWriter(f"{tmp}/exps.jsonl") as writer:
            writer.write(exps)
        back = JsonlReader(f"{tmp}/exps.jsonl").read_all()
    assert len(back) == len(exps)
    for a, b in zip(back, exps, strict=True):
        assert_same_experience(a, b)
        assert_same_experience(experience_from_dict(experience_to_dict(a)), b)
