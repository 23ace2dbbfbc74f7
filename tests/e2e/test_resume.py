"""End to end: a run killed with SIGKILL in the middle of a step and restarted with
``continue_from_checkpoint: true`` ends with exactly the weights of an uninterrupted run.

Synchronous schedule (sync_interval 1, sync_offset 0), 3 steps, a checkpoint every step,
two training tasksets (the first prepared by the task pipeline, read shuffled) and two
concurrent workflow runners. The reward is the share of distinct characters in the
response, so the tiny random model gets a non-zero GRPO signal and its weights move.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[2]
SHARD = "actor/model_world_size_1_rank_0.pt"

REWARD_PLUGIN = """
import os
import time

from trinity.rewards.registry import REWARD_FNS


@REWARD_FNS.register("char_variety_reward")
def char_variety_reward(response: str, truth: object) -> dict[str, float]:
    # the run to be killed holds step 2 here, so it is killed in the middle of that step
    hold = os.environ.get("HOLD_STEP_2_OF_LOG")
    while hold and os.path.exists(hold) and "explore step 2 begins" in open(hold).read():
        time.sleep(0.5)
    return {"variety": len(set(response)) / max(len(response), 1)}
"""


def write_inputs(tmp_path: Path, experience_buffer: dict | None = None) -> tuple[Path, Path]:
    """Plugins (the reward) and a config with two tasksets, the first from a task pipeline;
    ``experience_buffer`` replaces the queue between explorer and trainer."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "char_variety_reward.py").write_text(REWARD_PLUGIN)
    raw = tmp_path / "raw.jsonl"
    # the pipeline keeps the 6 rows of level 0; the second taskset holds 3 rows
    raw.write_text(
        "".join(
            json.dumps({"question": f"{i} + {i + 1} = ?", "answer": str(2 * i + 1), "level": i % 2})
            + "\n"
            for i in range(12)
        )
    )
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "train.jsonl").write_text(
        "".join(
            json.dumps({"question": f"{i} * 3 = ?", "answer": str(3 * i)}) + "\n" for i in range(3)
        )
    )
    config = {
        "project": "trinity-demo",
        "name": "resume",
        "mode": "both",
        "checkpoint_root_dir": "${oc.env:ROOT}",
        "continue_from_checkpoint": True,
        "seed": 7,
        "algorithm": {
            "algorithm_type": "grpo",
            "repeat_times": 4,
            "kl_loss_fn": "none",
            "optimizer": {"lr": 1e-3},
        },
        "model": {
            "model_path": "${oc.env:MODEL}",
            "max_prompt_tokens": 64,
            "max_response_tokens": 16,
            "dtype": "bfloat16",
        },
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {
            "batch_size": 3,
            "total_steps": 3,
            "explorer_input": {
                "tasksets": [
                    {
                        "name": "sums",
                        "path": str(raw),
                        "task_selector": "shuffle",
                        "format": {"prompt_key": "question", "response_key": "answer"},
                        "rollout_args": {"temperature": 1.0},
                    },
                    {
                        "name": "products",
                        "path": str(extra),
                        "format": {"prompt_key": "question", "response_key": "answer"},
                        "rollout_args": {"temperature": 1.0},
                    },
                ],
                "default_workflow_type": "math_workflow",
                "default_reward_fn_type": "char_variety_reward",
            },
            "trainer_input": {
                "experience_buffer": experience_buffer
                or {"name": "resume_buffer", "storage_type": "queue"},
            },
        },
        "data_processor": {
            "task_pipeline": {
                "inputs": [str(raw)],
                "target_fields": ["question", "answer", "level"],
                "operators": [
                    {"name": "value_filter", "args": {"key": "level", "keep_values": [0]}}
                ],
            },
        },
        "explorer": {"runner_per_model": 2, "eval_on_startup": False},
        "synchronizer": {"sync_method": "memory", "sync_interval": 1, "sync_offset": 0},
        "trainer": {
            "save_interval": 1,
            "enable_gradient_checkpointing": False,
            "trainer_config": {
                "actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 12}}
            },
        },
        "monitor": {"monitor_type": "tensorboard"},
    }
    path = tmp_path / "resume.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    return path, plugins


def command(config: Path, plugins: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trinity",
        "run",
        "--config",
        str(config),
        "--plugin-dir",
        str(plugins),
    ]


def start(
    args: list[str], log: Path, *, root: Path, model: Path, hold_step_2: Path | None = None
) -> subprocess.Popen:
    """``hold_step_2``: the run's explorer log; its rewards then wait once step 2 began."""
    # a session of its own: the run, its Ray processes and actors form one process group
    # bf16 on every CPU: in float32 two uninterrupted runs of this config already differ
    # (by about 3e-3 in the embeddings after 4 steps, measured on an AVX2 EPYC): a row's
    # rollout log-probs vary in their last bits with the rows that share its decode batch,
    # which depends on the two runners' timing, and AdamW turns such differences into
    # lr-sized steps. In bf16 the runs agree bit for bit.
    env = {**os.environ, "ROOT": str(root), "MODEL": str(model), "TRINITY_KEEP_BF16": "1"}
    if hold_step_2 is not None:
        env["HOLD_STEP_2_OF_LOG"] = str(hold_step_2)
    with open(log, "w") as out:
        return subprocess.Popen(
            args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def finish(proc: subprocess.Popen, log: Path, timeout: float = 600) -> None:
    assert proc.wait(timeout=timeout) == 0, log.read_text()[-4000:]


def wait_for(predicate, proc: subprocess.Popen, log: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, (
            f"the run ended before it could be killed:\n{log.read_text()[-4000:]}"
        )
        assert time.monotonic() < deadline, "timed out waiting for the run to reach step 2"
        time.sleep(0.05)


def kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # Ray's processes leave with their parent
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)


def weights(job: Path, step: int) -> dict[str, torch.Tensor]:
    return torch.load(job / f"global_step_{step}" / SHARD, weights_only=True)


def tasks_run(job: Path) -> dict[str, int]:
    """Tasks per taskset that the explorer's runners finished."""
    counts: dict[str, int] = {}
    for log in (job / "log").glob("explorer_runner_*.log"):
        for name in re.findall(r"task \d+ of '(\w+)' done", log.read_text()):
            counts[name] = counts.get(name, 0) + 1
    return counts


def kill_in_step_2(args: list[str], root: Path, model: Path, log: Path) -> Path:
    """Start a run, kill it once step 1 is checkpointed and explore step 2 has begun (its
    rewards wait); returns its job dir."""
    job = root / "trinity-demo" / "resume"
    proc = start(args, log, root=root, model=model, hold_step_2=job / "log" / "explorer.log")

    def in_step_2() -> bool:
        latest = job / "latest_checkpointed_iteration.txt"
        explorer_log = job / "log" / "explorer.log"
        return (
            latest.exists()
            and latest.read_text().strip() == "1"
            and explorer_log.exists()
            and "explore step 2 begins" in explorer_log.read_text()
        )

    wait_for(in_step_2, proc, log)
    kill_group(proc)
    assert (job / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    return job


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    config, plugins = write_inputs(tmp_path)
    args = command(config, plugins)

    # the reference: three steps without interruption
    ref_root, ref_log = tmp_path / "reference", tmp_path / "reference.log"
    finish(start(args, ref_log, root=ref_root, model=tiny_model_dir), ref_log)
    ref_job = ref_root / "trinity-demo" / "resume"
    # the task pipeline wrote the first taskset; every batch drew 2 tasks from it, 1 from the other
    prepared = ref_job / "buffer" / "task_pipeline" / "sums.jsonl"
    assert [json.loads(line)["level"] for line in prepared.read_text().splitlines()] == [0] * 6
    assert "task pipeline: 12 tasks in, 6 out" in ref_log.read_text()
    assert tasks_run(ref_job) == {"sums": 6, "products": 3}
    rows = (ref_job / "monitor" / "resume_explorer_metrics.jsonl").read_text().splitlines()
    steps = [json.loads(row) for row in rows]
    assert [r["rollout/taskset/sums/num_experiences"] for r in steps] == [8.0] * 3  # 2 tasks x 4
    assert [r["rollout/taskset/products/num_experiences"] for r in steps] == [4.0] * 3

    # the same run, killed once step 1 is checkpointed and step 2 has begun
    root = tmp_path / "interrupted"
    job = kill_in_step_2(args, root, tiny_model_dir, tmp_path / "killed.log")
    assert not (job / "global_step_2" / "actor" / "optim_world_size_1_rank_0.pt").exists()
    # the explorer's state matching checkpoint 1 was kept, though it ran ahead
    meta = json.loads((job / "explorer_meta.json").read_text())
    assert meta["by_step"]["1"]["taskset"]["position"] == 3  # one batch of 3 tasks

    resumed_log = tmp_path / "resumed.log"
    finish(start(args, resumed_log, root=root, model=tiny_model_dir), resumed_log)
    text = resumed_log.read_text()
    assert "resuming after step 1" in text
    assert f"task pipeline: reusing {job / 'buffer' / 'task_pipeline' / 'sums.jsonl'}" in text
    trainer_log = (job / "log" / "trainer.log").read_text()
    assert "resumed trainer from step 1" in trainer_log
    assert trainer_log.count("train step 1 begins") == 1  # step 1 was not redone
    assert "resumed the explorer after step 1" in (job / "log" / "explorer.log").read_text()

    initial = load_file(tiny_model_dir / "model.safetensors")
    expected, got = weights(ref_job, 3), weights(job, 3)
    assert any(not torch.equal(initial[k], expected[k]) for k in initial), "the policy never moved"
    assert any(not torch.equal(weights(ref_job, 1)[k], expected[k]) for k in expected)
    for key, value in expected.items():
        assert torch.equal(value, got[key]), (key, (value - got[key]).abs().max())


def trainer_metrics(job: Path) -> dict[int, dict]:
    """The trainer's metrics by step (a resumed run appends to the killed run's file)."""
    rows = (job / "monitor" / "resume_trainer_metrics.jsonl").read_text().splitlines()
    return {row["step"]: row for row in map(json.loads, rows)}


@pytest.mark.slow
def test_resumed_run_reads_its_sql_buffer_from_the_checkpointed_position(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """An sql experience buffer outlives the run; the resumed trainer's first batch is the
    one explore step 2 writes, not the rows of step 1 that checkpoint 1 already trained on."""
    database = tmp_path / "experiences.db"
    buffer = {"name": "resume_buffer", "storage_type": "sql", "path": str(database)}
    config, plugins = write_inputs(tmp_path, buffer)
    args = command(config, plugins)
    root = tmp_path / "interrupted"
    job = kill_in_step_2(args, root, tiny_model_dir, tmp_path / "killed.log")

    resumed_log = tmp_path / "resumed.log"
    finish(start(args, resumed_log, root=root, model=tiny_model_dir), resumed_log)
    assert "resumed trainer from step 1" in (job / "log" / "trainer.log").read_text()
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT CAST(eid_batch AS INTEGER), model_version FROM experience ORDER BY id"
        ).fetchall()
    # 3 tasks x 4 rollouts per explore step; explore step s samples with policy s - 1.
    # The killed run stored step 1 and, when its explorer got that far, step 2, which the
    # resumed explorer stores again: the trainer must skip that copy, not train on it twice
    old_step_2 = len(rows) - 36
    assert old_step_2 in (0, 12), rows
    assert rows == [(1, 0)] * 12 + [(2, 1)] * old_step_2 + [(2, 1)] * 12 + [(3, 2)] * 12
    # staleness = train step - 1 - model_version: 1 for a re-read of explore step 1's rows
    metrics = trainer_metrics(job)
    assert [metrics[step]["trainer/staleness/mean"] for step in (1, 2, 3)] == [0.0, 0.0, 0.0]
    positions = [
        json.loads((job / f"global_step_{step}" / "buffer_position.json").read_text())
        for step in (1, 2, 3)
    ]
    # rows read up to the end of explore step 1, then of each step the resumed run stored
    assert [p["position"]["cursor"] for p in positions] == [12, 24 + old_step_2, 36 + old_step_2]
