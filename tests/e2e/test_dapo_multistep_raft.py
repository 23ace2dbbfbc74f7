"""dapo, multi_step_grpo, gigpo and raft through ``trinity run``: one run, four stages of
2 steps each on the tiny model (one Ray start for the four types).

dapo answers additions with math_dapo_reward, dynamic sampling on with one extra round:
the tiny model answers no addition right, so groups tie, are dropped, and the step is
topped up with them after the extra round (tests/unit/explorer/test_dynamic_sampling.py
covers the refill with hand-made groups); multi_step_grpo and
gigpo play guess_number with one experience per turn; raft trains the best additions with
the SFT loss.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from cli_testing import REPO, run_cli

STAGES = ("dapo", "multi_step_grpo", "gigpo", "raft")
ARITHMETIC = {
    "name": "arithmetic",
    "path": str(REPO / "examples/arithmetic/data"),
    "split": "train",
    "format": {"prompt_key": "question", "response_key": "answer"},
}
GUESS_NUMBER = {
    "name": "guess_number",
    "path": str(REPO / "examples/guess_number/data"),
    "split": "train",
    "workflow_args": {"env": "guess_number", "max_turns": 2},
}


def stage(name: str, taskset: dict, workflow: str, reward_fn: str | None, sampling: dict) -> dict:
    return {
        "stage_name": name,
        "algorithm": {"algorithm_type": name, "dynamic_sampling": sampling},
        "buffer": {
            "explorer_input": {
                "taskset": taskset,
                "default_workflow_type": workflow,
                "default_reward_fn_type": reward_fn,
            }
        },
    }


def config(model_dir: Path, root: Path) -> dict:
    dapo_taskset = {
        **ARITHMETIC,
        "reward_fn_args": {
            "enable_overlong_penalty": True,
            "max_response_length": 8,
            "cache_length": 4,
        },
    }
    return {
        "project": "p",
        "name": "four",
        "mode": "both",
        "checkpoint_root_dir": str(root),
        "algorithm": {"algorithm_type": "dapo", "repeat_times": 2, "optimizer": {"lr": 1e-4}},
        "model": {"model_path": str(model_dir), "max_prompt_tokens": 256, "max_response_tokens": 8},
        "buffer": {
            "batch_size": 2,
            "total_steps": 2,
            "explorer_input": {"taskset": ARITHMETIC},
            "trainer_input": {"experience_buffer": {"name": "exp", "storage_type": "queue"}},
        },
        "explorer": {"runner_per_model": 2, "eval_on_startup": False},
        "synchronizer": {"sync_method": "memory"},
        "stages": [
            stage(
                "dapo",
                dapo_taskset,
                "math_workflow",
                "math_dapo_reward",
                {"enable": True, "max_extra_rounds": 1},
            ),
            stage("multi_step_grpo", GUESS_NUMBER, "step_wise_env_workflow", None, {}),
            stage("gigpo", GUESS_NUMBER, "step_wise_env_workflow", None, {}),
            stage("raft", ARITHMETIC, "math_workflow", "math_reward", {}),
        ],
    }


def rows(job: Path, suffix: str) -> list[dict]:
    [path] = (job / "monitor").rglob(f"*_{suffix}_metrics.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_four_types_as_stages(tiny_model_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "four.yaml"
    path.write_text(yaml.safe_dump(config(tiny_model_dir, tmp_path)))
    result = run_cli("run", "--config", str(path))
    assert result.returncode == 0, result.stderr[-4000:]
    for name in STAGES:
        job = tmp_path / "p" / "four" / name
        trained = rows(job, "trainer")
        assert [r["step"] for r in trained] == [1, 2], name
        for row in trained:
            assert all(math.isfinite(v) for v in row.values() if isinstance(v, float)), name
        assert (job / "global_step_2/actor/model_world_size_1_rank_0.pt").exists(), name
    dapo = rows(tmp_path / "p" / "four" / "dapo", "explorer")
    assert all(r["rollout/reward/format_score/mean"] <= 0 for r in dapo)  # overlong penalty
    for r in dapo:  # every step full (2 groups), in at most 1 + 1 rounds
        prefix = "rollout/dynamic_sampling"
        assert r[f"{prefix}/kept_groups"] + r[f"{prefix}/topped_up_groups"] == 2
        assert r[f"{prefix}/rounds"] in (1.0, 2.0)
        assert r["rollout/num_experiences"] == 4
    steps = rows(tmp_path / "p" / "four" / "gigpo", "explorer")
    assert all(r["rollout/num_experiences"] >= 4 for r in steps)  # 2 tasks x 2 episodes
    raft = rows(tmp_path / "p" / "four" / "raft", "explorer")
    assert all("rollout/best_of_group/masked" in r for r in raft)
    assert all("actor/sft_loss" in r for r in rows(tmp_path / "p" / "four" / "raft", "trainer"))
