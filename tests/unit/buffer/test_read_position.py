"""Read positions of the persistent experience buffers, saved with each checkpoint.

A resumed trainer continues where the checkpoint's train step stopped reading; the rows
the interrupted run's explorer stored for later explore steps are skipped, since the
resumed explorer writes those steps again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from buffer_testing import full_experience, storage_config

from trinity.buffer import make_experience_buffer
from trinity.launch.buffer_actor import BufferActor
from trinity.trainer import checkpoint as ckpt
from trinity.trainer.buffer_position import (
    BUFFER_POSITION,
    buffer_position_at,
    save_buffer_position,
)
from trinity.types import EID, Experience


def step_rows(step: int, n: int = 2) -> list[Experience]:
    """``n`` experiences of explore step ``step``, each named ``s<step>.<i>``."""
    rows = []
    for i in range(n):
        exp = full_experience(i)
        exp.eid = EID(batch=step, task=i)
        exp.prompt_text = f"s{step}.{i}"
        rows.append(exp)
    return rows


def names(exps: list[Experience]) -> list[str]:
    return [e.prompt_text for e in exps]


def buffer_config(kind: str, tmp_path: Path, **fields):
    if kind == "sql":
        return storage_config(storage_type="sql", path=str(tmp_path / "exp.db"), **fields)
    if kind == "file":
        return storage_config(storage_type="file", path=str(tmp_path / "exp.jsonl"), **fields)
    # a priority queue is persistent through its backup
    return storage_config(
        storage_type="queue",
        use_priority_queue=True,
        reuse_cooldown_time=0.0,
        path=str(tmp_path / "backup.db"),
        **fields,
    )


def save_checkpoint(job: Path, step: int, position: dict | None) -> None:
    """What the trainer does at a save: the position first, then the checkpoint's commit."""
    if position is not None:
        save_buffer_position(job, step, position)
    ckpt.save_actor_checkpoint(
        job, step, model_state={"w": torch.zeros(1)}, optim_state={}, extra_state={}
    )


@pytest.mark.parametrize("kind", ["sql", "file"])
def test_resumed_reader_continues_after_the_checkpointed_batch(kind: str, tmp_path: Path) -> None:
    job = tmp_path / "job"
    cfg = buffer_config(kind, tmp_path, max_read_timeout=0.05)
    run = BufferActor(cfg)
    run.put(step_rows(1))
    batch, position = run.read(2, None)
    assert names(batch) == ["s1.0", "s1.1"]
    save_checkpoint(job, 1, position)
    run.put(step_rows(2))  # the explorer ran ahead, then the run was killed
    run.close()

    resumed = BufferActor(cfg)
    resumed.resume(str(job), 1, explorer_resumes=True)
    resumed.put(step_rows(2))  # the resumed explorer writes step 2 again
    resumed.put(step_rows(3))
    assert names(resumed.get(2, None)) == ["s2.0", "s2.1"]
    assert names(resumed.get(2, None)) == ["s3.0", "s3.1"]
    assert resumed.get(2, 0.05) == []
    resumed.close()


@pytest.mark.parametrize("kind", ["sql", "file"])
def test_mode_train_resumes_at_the_position_and_keeps_the_rows_after_it(
    kind: str, tmp_path: Path
) -> None:
    """No explorer in mode train: the rows after the position are the ones still to train on."""
    job = tmp_path / "job"
    cfg = buffer_config(kind, tmp_path, max_read_timeout=0.05)
    filled = BufferActor(cfg)
    filled.put(step_rows(1) + step_rows(2))
    _, position = filled.read(2, None)
    save_checkpoint(job, 1, position)
    filled.close()

    resumed = BufferActor(cfg)
    resumed.resume(str(job), 1, explorer_resumes=False)
    assert names(resumed.get(4, None)) == ["s2.0", "s2.1"]
    resumed.close()


def test_the_position_is_the_one_of_the_batch_read_not_a_later_read(tmp_path: Path) -> None:
    cfg = buffer_config("sql", tmp_path)
    run = BufferActor(cfg)
    run.put(step_rows(1) + step_rows(2))
    _, first = run.read(2, None)
    _, second = run.read(2, None)
    assert first["position"] != second["position"]
    resumed = BufferActor(cfg)
    resumed.queue.load_state_dict(first["position"])
    assert names(resumed.get(2, 0.05)) == ["s2.0", "s2.1"]
    run.close()
    resumed.close()


def test_a_position_saved_without_its_checkpoint_is_not_used(tmp_path: Path) -> None:
    """A kill after the position of step 2 is written but before its checkpoint commits:
    the run resumes after step 1, with step 1's position."""
    job = tmp_path / "job"
    save_checkpoint(job, 1, {"storage_type": "sql", "path": "p", "position": {"cursor": 2}})
    save_buffer_position(job, 2, {"storage_type": "sql", "path": "p", "position": {"cursor": 4}})
    assert ckpt.read_latest(job) == 1
    assert buffer_position_at(job, 1)["position"] == {"cursor": 2}
    # the step's later commit keeps the position written before it
    ckpt.save_actor_checkpoint(
        job, 2, model_state={"w": torch.zeros(1)}, optim_state={}, extra_state={}
    )
    assert buffer_position_at(job, 2)["position"] == {"cursor": 4}
    assert ckpt.list_steps(job) == [1, 2]


def test_a_resume_without_a_saved_position_skips_what_the_old_run_stored(
    tmp_path: Path,
) -> None:
    """Checkpoints written before positions were saved: in mode both the old rows are
    trained on or superseded, as with the in-memory queue."""
    job = tmp_path / "job"
    cfg = buffer_config("sql", tmp_path, max_read_timeout=0.05)
    old = BufferActor(cfg)
    old.put(step_rows(1) + step_rows(2))
    old.close()
    save_checkpoint(job, 1, None)
    resumed = BufferActor(cfg)
    resumed.resume(str(job), 1, explorer_resumes=True)
    resumed.put(step_rows(2))
    assert names(resumed.get(4, None)) == ["s2.0", "s2.1"]
    resumed.close()


def test_a_position_of_another_storage_is_not_loaded(tmp_path: Path) -> None:
    job = tmp_path / "job"
    sql = BufferActor(buffer_config("sql", tmp_path))
    sql.put(step_rows(1))
    _, position = sql.read(2, None)
    sql.close()
    save_checkpoint(job, 1, position)
    other = BufferActor(buffer_config("file", tmp_path, max_read_timeout=0.05))
    other.put(step_rows(1))
    other.resume(str(job), 1, explorer_resumes=False)
    assert names(other.get(2, None)) == ["s1.0", "s1.1"]  # from its start
    other.close()


def test_the_position_file_survives_kill_9_between_writes(tmp_path: Path) -> None:
    """A process rewriting the position as fast as it can, killed at a random moment,
    leaves a whole position (the last or the one before), never a torn file."""
    job = tmp_path / "job"
    script = (
        "import sys\n"
        "from trinity.trainer.buffer_position import save_buffer_position\n"
        "i = 0\n"
        "while True:\n"
        "    save_buffer_position(sys.argv[1], 1, {'position': {'cursor': i}, 'pad': 'x' * i})\n"
        "    i += 1\n"
    )
    path = job / "global_step_1" / BUFFER_POSITION
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-c", script, str(job)])
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05 + 0.1 * (os.getpid() % 3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        saved = json.loads(path.read_text())
        assert saved["pad"] == "x" * saved["position"]["cursor"]
        leftovers = [p.name for p in path.parent.iterdir() if p.name != BUFFER_POSITION]
        assert all(name.startswith(".") for name in leftovers), leftovers


def test_priority_queue_restores_what_it_held_from_its_backup(tmp_path: Path) -> None:
    """The held experiences (with their read counts) of checkpoint 1 come back; those of
    explore step 2, which the resumed explorer writes again, do not."""
    job = tmp_path / "job"
    cfg = buffer_config("priority", tmp_path, max_read_timeout=0.05)
    run = BufferActor(cfg)
    run.put(step_rows(1, 3))
    batch, position = run.read(2, None)  # reused at once: cooldown 0
    assert len(batch) == 2
    save_checkpoint(job, 1, position)
    run.put(step_rows(2))
    run.close()

    resumed = BufferActor(cfg)
    resumed.resume(str(job), 1, explorer_resumes=True)
    held = resumed.queue.get(10, 0.05)
    assert sorted(names(held)) == ["s1.0", "s1.1", "s1.2"]
    counts = {e.prompt_text: e.info["use_count"] for e in held}
    assert sorted(counts.values()) == [0, 1, 1]
    resumed.close()


def test_make_experience_buffer_state_round_trip_for_file(tmp_path: Path) -> None:
    cfg = buffer_config("file", tmp_path, max_read_timeout=0.05)
    buffer = make_experience_buffer(cfg)
    buffer.put(step_rows(1, 3))
    assert names(buffer.get(2)) == ["s1.0", "s1.1"]
    again = make_experience_buffer(cfg)
    again.load_state_dict(buffer.state_dict())
    assert names(again.get(5)) == ["s1.2"]
    buffer.close()
    again.close()
