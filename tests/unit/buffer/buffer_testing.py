"""Shared test helpers: a storage config with the config guide's field names, experiences,
and throw-away PostgreSQL databases."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import postgres_server
import pytest
import torch
from hypothesis import strategies as st

from trinity.types import EID, Experience


@dataclass
class FormatConfig:
    prompt_type: str = "plaintext"
    prompt_key: str = "prompt"
    response_key: str = "response"
    system_prompt_key: str | None = None
    system_prompt: str | None = None
    messages_key: str = "messages"
    tools_key: str = "tools"
    chosen_key: str = "chosen"
    rejected_key: str = "rejected"
    enable_concatenated_multi_turn: bool = False
    chat_template: str = ""


@dataclass
class RolloutArgs:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    logprobs: int = 0
    max_tokens: int | None = None


@dataclass
class StorageConfig:
    name: str = "tasks"
    storage_type: str = "file"
    path: str = ""
    subset_name: str | None = None
    split: str = "train"
    repeat_times: int | None = None
    format: FormatConfig = field(default_factory=FormatConfig)
    rollout_args: RolloutArgs = field(default_factory=RolloutArgs)
    default_workflow_type: str | None = None
    default_reward_fn_type: str | None = None
    workflow_args: dict[str, Any] = field(default_factory=dict)
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    max_read_timeout: float = 1800.0
    use_priority_queue: bool = False
    reuse_cooldown_time: float | None = None
    capacity: int = 10000
    is_eval: bool = False
    skip_invalid_rows: bool = False


def storage_config(prompt_key: str = "prompt", **fields: Any) -> StorageConfig:
    return StorageConfig(format=FormatConfig(prompt_key=prompt_key), **fields)


def full_experience(i: int = 0) -> Experience:
    """An experience with every field set, of several dtypes, values depending on ``i``."""
    return Experience(
        tokens=torch.tensor([101, 7, 8, 9000 + i, 2], dtype=torch.int64),
        prompt_length=2,
        logprobs=torch.tensor([-0.125, -1.0e-8, -3.3333333], dtype=torch.float32),
        action_mask=torch.tensor([True, False, True]),
        reward=0.5 + i,
        advantages=torch.tensor([0.1, -0.2, 0.3], dtype=torch.bfloat16),
        returns=torch.tensor([1.0 / 3.0, 2.0, -0.0], dtype=torch.float64),
        eid=EID(batch=f"eval_{i}", task=i, run=3, step=1),
        info={"model_version": 4 + i, "task": {"q": "1+1", "a": [2]}},
        metrics={"accuracy": 1.0, "format": 0.25},
        prompt_text=f"question {i}",
        response_text=f"answer {i} \u00e9\u4e2d",
        messages=[{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}],
        chosen=torch.tensor([5, 6], dtype=torch.int32),
        rejected=torch.tensor([[1, 2], [3, 4]], dtype=torch.int16),
        teacher_logprobs=torch.tensor([-0.5, -2.0e-7, -7.25], dtype=torch.float32),
        temperature=0.7,
    )


def assert_same_experience(a: Experience, b: Experience) -> None:
    """Field-by-field equality; tensors must match in dtype, shape and bits.

    NaN only has to be NaN in both: JSON writes every NaN as ``NaN``, dropping its
    sign and payload bits.
    """
    for name in (
        "tokens",
        "logprobs",
        "action_mask",
        "advantages",
        "returns",
        "chosen",
        "rejected",
        "teacher_logprobs",
    ):
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            assert x is None and y is None, name
            continue
        assert x.dtype == y.dtype, name
        assert x.shape == y.shape, name
        if x.dtype.is_floating_point:
            nan = x.isnan()
            assert torch.equal(nan, y.isnan()), name
            x, y = x[~nan], y[~nan]
        # bit patterns, so that -0.0 and 0.0 differ
        assert _raw(x) == _raw(y), name
    for name in ("prompt_length", "reward", "eid", "info", "metrics", "messages", "temperature"):
        assert getattr(a, name) == getattr(b, name), name
    assert a.prompt_text == b.prompt_text
    assert a.response_text == b.response_text


# (storage_type, backup file, priority queue): every way the trainer reads what the
# explorer wrote, for ``pass_every_buffer``
EVERY_BUFFER = [
    ("queue", None, False),
    ("queue", "backup.db", False),
    ("queue", "backup.jsonl", False),
    ("queue", None, True),
    ("sql", "buffer.db", False),
]


def pass_every_buffer(
    tmp_path: Any, case: tuple[str, str | None, bool], sent: list[Experience]
) -> list[list[Experience]]:
    """``sent`` put into the buffer of ``case`` (one of ``EVERY_BUFFER``) and read back
    by the trainer's ``get``, then from its backup file when it has one: each reading,
    in ``sent``'s order when every ``eid.task`` differs."""
    from trinity.buffer import SQLExperienceStorage, make_experience_buffer
    from trinity.buffer.jsonl import JsonlReader

    storage_type, backup, priority = case
    path = str(tmp_path / backup) if backup else None
    cfg = storage_config(
        storage_type=storage_type, path=path, max_read_timeout=0.1, use_priority_queue=priority
    )
    buffer = make_experience_buffer(cfg)
    buffer.put(sent)
    # a priority queue hands out the newest first
    readings = [sorted(buffer.get(len(sent), timeout=0.1), key=lambda e: str(e.eid.task))]
    buffer.close()
    if backup and backup.endswith(".db"):
        stored = SQLExperienceStorage(path)
        readings.append(stored.read(len(sent)))
        stored.close()
    if backup and backup.endswith(".jsonl"):
        readings.append(JsonlReader(path).read_new(len(sent)))
    return readings


def written_before_the_column(
    tmp_path: Any, column: str, old: Experience, new: Experience
) -> tuple[Experience, Experience]:
    """``old`` and ``new`` as read back from one SQLite table: ``old`` written while the
    table lacked ``column`` (as the schema before that field made it), ``new`` after
    reopening it (which adds the column back)."""
    import sqlite3

    from trinity.buffer import SQLExperienceStorage

    path = tmp_path / "old.db"
    storage = SQLExperienceStorage(str(path))
    storage.write([old])
    storage.close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"ALTER TABLE experience DROP COLUMN {column}")
        columns = [row[1] for row in conn.execute("PRAGMA table_info(experience)")]
    assert column not in columns
    storage = SQLExperienceStorage(str(path))
    storage.write([new])
    first, second = storage.read(2)
    storage.close()
    return first, second


def _raw(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def wait_until_blocked(thread: threading.Thread) -> None:
    """Return once ``thread`` sleeps on a condition (a get or put that waits); fail if it
    finishes instead, or is still running after 5 s.

    Sleeping a while and checking ``is_alive`` cannot tell a thread that waits from one
    that has not run yet; its stack can.
    """
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident)
        while frame is not None:
            if frame.f_code is threading.Condition.wait.__code__:
                return
            frame = frame.f_back
        assert thread.is_alive(), "the call returned instead of waiting"
        time.sleep(0.001)
    pytest.fail("the call neither waited nor returned within 5 s")


POSTGRES_ENV = "TRINITY_TEST_POSTGRES_URL"


def postgres_server_url() -> Iterator[str]:
    """$TRINITY_TEST_POSTGRES_URL when set, else a server of this process's own (see
    ``postgres_server``), stopped when the caller's generator is closed."""
    url = os.environ.get(POSTGRES_ENV)
    if url:
        yield url
        return
    url = postgres_server.acquire()
    try:
        yield url
    finally:
        postgres_server.release()


@contextlib.contextmanager
def fresh_postgres_database(base_url: str) -> Iterator[str]:
    """A new empty database on the server of ``base_url``, dropped afterwards; yields its URL."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"trinity_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(base_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


# ---- hypothesis strategies: any experience the storages must keep exactly ----

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]

JSON_LEAF = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
JSON_LEAF |= st.floats(allow_nan=False, allow_infinity=False)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def tensors(draw: st.DrawFn, length: int | None = None) -> torch.Tensor:
    dtype = draw(st.sampled_from(DTYPES))
    shape = (
        (length,) if length is not None else tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    )
    numel = math.prod(shape)
    if dtype.is_floating_point:
        # any float64 value, rounded to the dtype: includes nan, inf, -0.0 and subnormals
        values = draw(st.lists(st.floats(), min_size=numel, max_size=numel))
        return torch.tensor(values, dtype=torch.float64).to(dtype).reshape(shape)
    if dtype == torch.bool:
        return torch.tensor(
            draw(st.lists(st.booleans(), min_size=numel, max_size=numel)), dtype=dtype
        ).reshape(shape)
    info = torch.iinfo(dtype)
    values = draw(st.lists(st.integers(info.min, info.max), min_size=numel, max_size=numel))
    return torch.tensor(values, dtype=dtype).reshape(shape)


@st.composite
def experiences(draw: st.DrawFn) -> Experience:
    length = draw(st.integers(1, 12))
    prompt_length = draw(st.integers(0, length))
    response_length = length - prompt_length
    tokens = torch.tensor(draw(st.lists(st.integers(0, 2**40), min_size=length, max_size=length)))
    optional_response = st.none() | tensors(length=response_length)
    return Experience(
        tokens=tokens,
        prompt_length=prompt_length,
        logprobs=draw(optional_response),
        action_mask=draw(st.none() | tensors(length=response_length)),
        reward=draw(st.none() | st.floats(allow_nan=False)),
        advantages=draw(optional_response),
        returns=draw(optional_response),
        teacher_logprobs=draw(optional_response),
        temperature=draw(
            st.none() | st.floats(min_value=0, exclude_min=True, allow_infinity=False)
        ),
        eid=EID(
            batch=draw(st.integers(0, 10**6) | st.text(max_size=8)),
            task=draw(st.integers(0, 10**6) | st.text(max_size=8)),
            run=draw(st.integers(0, 64)),
            step=draw(st.integers(0, 64)),
        ),
        info=draw(st.dictionaries(st.text(max_size=6), JSON_VALUE, max_size=3)),
        metrics=draw(st.dictionaries(st.text(max_size=6), st.floats(allow_nan=False), max_size=3)),
        prompt_text=draw(st.none() | st.text()),
        response_text=draw(st.none() | st.text()),
        messages=draw(
            st.none()
            | st.lists(
                st.fixed_dictionaries({"role": st.text(max_size=9), "content": st.text()}),
                max_size=3,
            )
        ),
        chosen=draw(st.none() | tensors()),
        rejected=draw(st.none() | tensors()),
    )
