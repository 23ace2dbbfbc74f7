"""SQLExperienceStorage on a real PostgreSQL server.

The server is TRINITY_TEST_POSTGRES_URL's when it is set, else one the session starts
from the `pgserver` wheel (``postgres_server.py``). Each test gets a database of its own.
"""

from __future__ import annotations

import math
import threading
import time

import torch
from buffer_testing import assert_same_experience, experiences, full_experience, storage_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete
from sqlalchemy.orm import Session

from trinity.buffer import SQLExperienceStorage, SQLTaskStorage, make_experience_buffer
from trinity.common.schema.sql_schema import ExperienceModel
from trinity.types import EID, Experience


def test_round_trip_cursor_and_count(postgres_url: str) -> None:
    storage = SQLExperienceStorage(postgres_url)
    storage.write([full_experience(i) for i in range(5)])
    assert storage.count() == 5
    assert [e.prompt_text for e in storage.read(2, offset=3)] == ["question 3", "question 4"]
    assert [e.prompt_text for e in storage.read_new(3)] == [
        "question 0",
        "question 1",
        "question 2",
    ]
    storage.write([full_experience(5)])
    back = storage.read_new(10)
    assert [e.prompt_text for e in back] == ["question 3", "question 4", "question 5"]
    assert_same_experience(back[-1], full_experience(5))
    storage.close()


def test_faq_query_works_on_postgres(postgres_url: str) -> None:
    storage = SQLExperienceStorage(postgres_url)
    storage.write([full_experience(i) for i in range(3)])
    with Session(storage.engine) as sess:
        rows = sess.query(ExperienceModel).limit(2).all()
        exps = [ExperienceModel.to_experience(r) for r in rows]
    assert [e.prompt_text for e in exps] == ["question 0", "question 1"]
    assert_same_experience(exps[1], full_experience(1))
    storage.close()


def test_non_finite_json_values_and_nul_text(postgres_url: str) -> None:
    # PostgreSQL's JSON has no NaN/Infinity and its text no NUL; both still round-trip
    # (floats exactly, NUL in display text as U+FFFD)
    exp = Experience(
        tokens=torch.tensor([1, 2, 3]),
        prompt_length=1,
        reward=-math.inf,
        info={"score": math.nan, "nested": [math.inf, {"x": -math.inf}], "s": "a\x00b"},
        metrics={"ratio": math.inf},
        prompt_text="before\x00after",
    )
    storage = SQLExperienceStorage(postgres_url)
    storage.write([exp])
    [back] = storage.read(1)
    assert back.reward == -math.inf
    assert math.isnan(back.info["score"])
    assert back.info["nested"] == [math.inf, {"x": -math.inf}]
    assert back.info["s"] == "a\x00b"  # JSON escapes NUL, so it survives
    assert back.metrics == {"ratio": math.inf}
    assert back.prompt_text == "before\ufffdafter"
    storage.close()


def test_a_writer_waits_for_an_open_write_so_ids_commit_in_order(postgres_url: str) -> None:
    """Without the table lock, the second writer's higher id could commit first; the reader
    would move its cursor past the first writer's id and never see that row."""
    writer = SQLExperienceStorage(postgres_url)
    reader = SQLExperienceStorage(postgres_url)
    slow = writer.engine.connect()
    trans = slow.begin()
    # another transaction, mid-write: row inserted (id 1), not committed
    sess = Session(bind=slow)
    sess.add(ExperienceModel.from_experience(full_experience(0)))
    sess.flush()

    done = threading.Event()
    thread = threading.Thread(target=lambda: (writer.write([full_experience(1)]), done.set()))
    thread.start()
    time.sleep(0.3)
    assert not done.is_set()  # the second writer waits for the lock
    assert reader.read_new(10) == []
    trans.commit()
    sess.close()
    slow.close()
    thread.join(10)
    assert done.is_set()
    assert [e.prompt_text for e in reader.read_new(10)] == ["question 0", "question 1"]
    writer.close()
    reader.close()


def test_sql_buffer_and_taskset_on_postgres(postgres_url: str) -> None:
    buffer = make_experience_buffer(
        storage_config(storage_type="sql", path=postgres_url, max_read_timeout=0.2)
    )
    buffer.put([full_experience(0), full_experience(1)])
    assert [e.prompt_text for e in buffer.get(5)] == ["question 0", "question 1"]  # after 0.2 s
    buffer.close()
    tasks = SQLTaskStorage(postgres_url)
    tasks.write_rows([{"prompt": "1+1", "answer": 2}])
    assert tasks.read_rows() == [{"prompt": "1+1", "answer": 2}]
    tasks.close()


PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.lists(experiences(), min_size=1, max_size=3))
def test_postgres_round_trip_property(module_postgres_url: str, exps: list[Experience]) -> None:
    storage = SQLExperienceStorage(module_postgres_url)
    with Session(storage.engine) as sess, sess.begin():
        sess.execute(delete(storage.model))
    storage.write(exps)
    back = storage.read(len(exps) + 1)
    storage.close()
    assert len(back) == len(exps)
    for a, b in zip(back, exps, strict=True):
        if b.prompt_text is not None and "\x00" in b.prompt_text:
            b.prompt_text = b.prompt_text.replace("\x00", "\ufffd")
        if b.response_text is not None and "\x00" in b.response_text:
            b.response_text = b.response_text.replace("\x00", "\ufffd")
        assert_same_experience(a, b)


def test_eid_kinds_survive(postgres_url: str) -> None:
    storage = SQLExperienceStorage(postgres_url)
    storage.write(
        [
            Experience(tokens=torch.tensor([1, 2]), prompt_length=1, eid=EID("eval_3", "7", 1, 2)),
            Experience(tokens=torch.tensor([1, 2]), prompt_length=1, eid=EID(4, 5, 0, 0)),
        ]
    )
    assert [e.eid for e in storage.read(2)] == [EID("eval_3", "7", 1, 2), EID(4, 5, 0, 0)]
    storage.close()
