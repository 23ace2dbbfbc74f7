"""make_experience_buffer: the buffer each storage_type names, and the polling readers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from buffer_testing import (
    assert_same_experience,
    full_experience,
    storage_config,
    wait_until_blocked,
)

from trinity.buffer import (
    ExperienceBufferConfigError,
    ExperienceQueue,
    PriorityExperienceQueue,
    QueueClosed,
    SQLExperienceStorage,
    StorageBuffer,
    make_auxiliary_buffers,
    make_experience_buffer,
)


def texts(exps) -> list[str]:
    return [e.prompt_text for e in exps]


def test_queue_uses_max_read_timeout_and_backs_up(tmp_path: Path) -> None:
    cfg = storage_config(
        storage_type="queue", path=str(tmp_path / "b.db"), max_read_timeout=0.2, capacity=8
    )
    buffer = make_experience_buffer(cfg)
    assert isinstance(buffer, ExperienceQueue) and buffer.capacity == 8
    buffer.put([full_experience(0), full_experience(1)])
    began = time.monotonic()
    assert texts(buffer.get(5)) == ["question 0", "question 1"]  # incomplete batch
    assert time.monotonic() - began >= 0.2
    buffer.close()
    backup = SQLExperienceStorage(str(tmp_path / "b.db"))
    assert backup.count() == 2
    backup.close()


def test_priority_queue_option() -> None:
    cfg = storage_config(storage_type="queue", use_priority_queue=True, reuse_cooldown_time=3.0)
    buffer = make_experience_buffer(cfg)
    assert isinstance(buffer, PriorityExperienceQueue)
    assert buffer.reuse_cooldown_time == 3.0 and buffer.read_timeout == cfg.max_read_timeout
    buffer.close()


def test_sql_buffer_reads_what_another_writer_stores(tmp_path: Path) -> None:
    path = str(tmp_path / "run" / "buffer.db")
    reader = make_experience_buffer(storage_config(storage_type="sql", path=path))
    writer = make_experience_buffer(storage_config(storage_type="sql", path=path))
    assert isinstance(reader, StorageBuffer)
    writer.put([full_experience(0)])

    def later() -> None:
        time.sleep(0.2)
        writer.put([full_experience(1), full_experience(2)])

    thread = threading.Thread(target=later)
    thread.start()
    got = reader.get(3, timeout=10)  # waits for the late batch
    thread.join()
    assert texts(got) == ["question 0", "question 1", "question 2"]
    assert_same_experience(got[2], full_experience(2))
    assert reader.get(1, timeout=0.05) == []

    # a restarted reader resumes after the last experience it returned
    state = reader.state_dict()
    reader.close()
    writer.put([full_experience(3)])
    again = make_experience_buffer(storage_config(storage_type="sql", path=path))
    again.load_state_dict(state)
    assert texts(again.get(5, timeout=0.05)) == ["question 3"]
    again.close()
    writer.close()


def test_file_buffer_in_a_directory(tmp_path: Path) -> None:
    buffer = make_experience_buffer(
        storage_config(storage_type="file", path=str(tmp_path / "out"), max_read_timeout=0.05)
    )
    buffer.put([full_experience(0), full_experience(1)])
    assert (tmp_path / "out" / "experiences.jsonl").exists()
    assert texts(buffer.get(1)) == ["question 0"]
    assert texts(buffer.get(5)) == ["question 1"]
    buffer.close()


def test_close_wakes_a_reader_waiting_without_timeout(tmp_path: Path) -> None:
    buffer = make_experience_buffer(
        storage_config(storage_type="sql", path=str(tmp_path / "b.db"), max_read_timeout=None)
    )
    box: dict = {}

    def read() -> None:
        try:
            buffer.get(1)
        except QueueClosed as exc:
            box["error"] = exc

    thread = threading.Thread(target=read)
    thread.start()
    wait_until_blocked(thread)
    began = time.monotonic()
    buffer.close()
    thread.join(5)
    assert isinstance(box.get("error"), QueueClosed)
    assert time.monotonic() - began < 1.0
    with pytest.raises(QueueClosed):
        buffer.put([full_experience(0)])


def test_config_errors_name_the_buffer(tmp_path: Path) -> None:
    with pytest.raises(ExperienceBufferConfigError, match="'exp_buf'.*needs a path"):
        make_experience_buffer(storage_config(name="exp_buf", storage_type="sql", path=""))
    with pytest.raises(ExperienceBufferConfigError, match="unknown storage_type 'redis'"):
        make_experience_buffer(storage_config(name="exp_buf", storage_type="redis"))


def test_auxiliary_buffers_by_name(tmp_path: Path) -> None:
    sft = tmp_path / "sft.jsonl"
    writer = make_experience_buffer(storage_config(storage_type="file", path=str(sft)))
    writer.put([full_experience(7)])
    writer.close()
    buffers = make_auxiliary_buffers(
        {
            "sft_dataset": storage_config(storage_type="file", path=str(sft)),
            "replay": storage_config(storage_type="queue"),
        }
    )
    assert set(buffers) == {"sft_dataset", "replay"}
    assert texts(buffers["sft_dataset"].get(1, timeout=0)) == ["question 7"]
    assert isinstance(buffers["replay"], ExperienceQueue)
    for b in buffers.values():
        b.close()
