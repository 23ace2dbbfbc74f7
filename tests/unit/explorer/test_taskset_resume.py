"""The explorer's taskset state on disk: kept per step for the checkpoints that may
name it, and found again when a run resumes; an explorer resumed from that state rolls
out what an uninterrupted one does; the task pipeline prepared at launch."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
import torch

from trinity.config import config_from_dict, load_config, resolve
from trinity.explorer.explorer import Explorer, make_taskset_mix
from trinity.explorer.explorer_state import (
    derived_explorer_state,
    explorer_state_at,
    save_explorer_state,
)
from trinity.launch.resume import resume_step
from trinity.launch.run import RunError, prepare_taskset
from trinity.trainer import checkpoint as ckpt

DEMO = Path(__file__).resolve().parents[3] / "examples" / "arithmetic" / "grpo.yaml"


def make_config(tmp_path: Path, **top) -> object:
    rows = [{"question": f"q{i}", "answer": str(i), "level": i % 3} for i in range(9)]
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    taskset = {
        "name": "math",
        "path": str(data),
        "task_selector": "shuffle",
        "format": {"prompt_key": "question", "response_key": "answer"},
    }
    raw = {
        "mode": "both",
        "model": {"model_path": "unused", "max_model_len": 64},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "buffer": {
            "batch_size": 2,
            "total_epochs": 3,
            "explorer_input": {"taskset": taskset, "default_workflow_type": "math_workflow"},
        },
        **top,
    }
    return resolve(config_from_dict(raw), now=datetime(2025, 1, 1))


def test_state_is_kept_for_every_step_a_checkpoint_may_name(tmp_path: Path) -> None:
    job = tmp_path / "job"
    for step in (1, 2, 3):
        save_explorer_state(
            job, step, {"taskset": {"position": 2 * step}, "model_version": step - 1}
        )
    meta = json.loads((job / "explorer_meta.json").read_text())
    assert meta["latest_iteration"] == 3 and meta["taskset"] == {"position": 6}
    assert sorted(meta["by_step"]) == ["1", "2", "3"]
    # once step 2 is checkpointed, older states can never be resumed from
    ckpt.write_text_atomic(job / ckpt.LATEST_CHECKPOINT, "2")
    save_explorer_state(job, 4, {"taskset": {"position": 8}, "model_version": 3})
    meta = json.loads((job / "explorer_meta.json").read_text())
    assert sorted(meta["by_step"]) == ["2", "3", "4"]
    assert explorer_state_at(job, 2) == {"taskset": {"position": 4}, "model_version": 1}
    assert explorer_state_at(job, 1) is None
    assert [p.name for p in job.iterdir() if p.name.startswith(".")] == []  # no temp files left


def test_a_meta_file_without_steps_still_names_its_latest_state(tmp_path: Path) -> None:
    ckpt.write_json_atomic(
        tmp_path / "explorer_meta.json",
        {"latest_iteration": 5, "taskset": {"position": 10}, "model_version": 4},
    )
    assert explorer_state_at(tmp_path, 5) == {"taskset": {"position": 10}, "model_version": 4}
    assert explorer_state_at(tmp_path, 4) is None


def test_derived_state_resumes_the_reader_after_whole_batches(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    state = derived_explorer_state(cfg.buffer, 3)
    uninterrupted = make_taskset_mix(cfg)
    for _ in range(3):
        uninterrupted.read_batch()
    resumed = make_taskset_mix(cfg)
    resumed.load_state_dict(state["taskset"])
    assert [t.index for t in resumed.read_batch()] == [t.index for t in uninterrupted.read_batch()]


def test_resume_step_follows_the_newest_full_checkpoint(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    job = tmp_path / "job"
    assert resume_step(cfg, job) == 0
    save_explorer_state(job, 3, {"taskset": {"position": 6}})
    assert resume_step(cfg, job) == 0  # the explorer ran ahead; nothing is checkpointed
    ckpt.write_text_atomic(job / ckpt.LATEST_CHECKPOINT, "2")
    assert resume_step(cfg, job) == 2
    # mode explore has no trainer: it continues after its last recorded step
    explore = make_config(tmp_path, mode="explore")
    assert resume_step(explore, job) == 3
    fresh = make_config(tmp_path, continue_from_checkpoint=False)
    assert resume_step(fresh, job) == 0


def test_task_pipeline_output_becomes_the_first_taskset(tmp_path: Path) -> None:
    raw = tmp_path / "raw.jsonl"
    raw.write_text(
        "".join(
            json.dumps({"question": f"r{i}", "answer": str(i), "level": i % 2}) + "\n"
            for i in range(6)
        )
    )
    cfg = make_config(
        tmp_path,
        data_processor={
            "task_pipeline": {
                "inputs": [str(raw)],
                "operators": [
                    {"name": "value_filter", "args": {"key": "level", "keep_values": [1]}}
                ],
            }
        },
    )
    job = tmp_path / "job"
    prepared = prepare_taskset(cfg, job)
    output = job / "buffer" / "task_pipeline" / "math.jsonl"
    taskset = prepared.buffer.explorer_input.taskset
    assert taskset.path == str(output) and prepared.buffer.explorer_input.tasksets[0] is taskset
    assert taskset.name == "math" and taskset.task_selector == "shuffle"  # only the path changed
    mix = make_taskset_mix(prepared)
    assert sorted(t.raw["question"] for t in mix.readers[0].read_all()) == ["r1", "r3", "r5"]
    assert len(mix) == 5  # 3 epochs x 3 tasks in batches of 2
    # a resumed run reads the tasks the interrupted one read, even if the inputs changed
    raw.write_text(json.dumps({"question": "new", "answer": "0", "level": 1}) + "\n")
    again = make_taskset_mix(prepare_taskset(cfg, job))
    assert [t.raw["question"] for t in again.readers[0].read_all()] == ["r1", "r3", "r5"]
    # a fresh run processes the inputs again
    fresh_cfg = make_config(
        tmp_path, continue_from_checkpoint=False, data_processor=cfg_pipeline(raw)
    )
    fresh = make_taskset_mix(prepare_taskset(fresh_cfg, job))
    assert [t.raw["question"] for t in fresh.readers[0].read_all()] == ["new"]


def cfg_pipeline(raw: Path) -> dict:
    return {"task_pipeline": {"inputs": [str(raw)]}}


def test_task_pipeline_needs_a_taskset_to_describe_its_output(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, data_processor=cfg_pipeline(tmp_path / "raw.jsonl"))
    cfg.buffer.explorer_input.taskset = None
    with pytest.raises(RunError, match="set buffer.explorer_input.taskset"):
        prepare_taskset(cfg, tmp_path / "job")


def test_a_resumed_explorer_rolls_out_what_an_uninterrupted_one_does(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    config = load_config(
        DEMO,
        [
            f"model.model_path={tiny_model_dir}",
            f"checkpoint_root_dir={tmp_path}",
            "continue_from_checkpoint=true",
            "model.max_response_tokens=8",
            "algorithm.repeat_times=2",
            "buffer.explorer_input.taskset.task_selector=shuffle",
            "buffer.explorer_input.eval_tasksets=[]",
            "explorer.runner_per_model=2",
        ],
    )
    uninterrupted = Explorer(config, model_dir=tiny_model_dir, log_dir=tmp_path / "a")
    try:
        first, _ = uninterrupted.explore_step(1)
        state = json.loads(json.dumps(uninterrupted.state_dict()))
        expected, _ = uninterrupted.explore_step(2)
    finally:
        uninterrupted.close()
    # a new process: fresh engine, fresh default generator, taskset state from disk
    resumed = Explorer(config, model_dir=tiny_model_dir, log_dir=tmp_path / "b")
    try:
        resumed.load_state_dict(state)
        got, _ = resumed.explore_step(2)
    finally:
        resumed.close()
    assert [e.eid.task for e in got] == [e.eid.task for e in expected]
    assert [e.response_text for e in got] == [e.response_text for e in expected]
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a.tokens, b.tokens)
    # the two rollouts of a task differ: each task has a seed, not each rollout
    assert expected[0].response_text != expected[1].response_text
    assert [e.response_text for e in first] != [e.response_text for e in expected]
