"""The workflow examples (countdown, guess_number, tool_call): their generators write the
shipped data, every taskset of their configs reads, and one explore step on the tiny
model runs each example's workflow as configured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trinity.buffer.errors import MissingKeyError
from trinity.buffer.task_reader import TasksetReader, workflow_reads_prompt
from trinity.config import load_config
from trinity.workflows.envs import GuessNumberEnv
from trinity.workflows.tools import calculator, tool_specs

REPO = Path(__file__).resolve().parents[3]
CONFIGS = {
    "countdown": REPO / "examples" / "countdown" / "countdown.yaml",
    "guess_number": REPO / "examples" / "guess_number" / "guess_number.yaml",
    "tool_call": REPO / "examples" / "tool_call" / "calculator.yaml",
}


def readers(config_path: Path, **overrides) -> list[TasksetReader]:
    cfg = load_config(config_path, [f"{k}={v}" for k, v in overrides.items()])
    inputs = cfg.buffer.explorer_input
    return [
        TasksetReader(
            taskset,
            batch_size=cfg.buffer.batch_size,
            default_workflow=inputs.default_workflow_type,
            default_reward_fn=inputs.default_reward_fn_type,
        )
        for taskset in (*inputs.tasksets, *inputs.eval_tasksets)
    ]


@pytest.mark.parametrize("name", ["guess_number", "tool_call"])
def test_generator_writes_the_shipped_data(name: str, tmp_path: Path) -> None:
    example = CONFIGS[name].parent
    subprocess.run(
        [sys.executable, str(example / "make_data.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        cwd=REPO,
    )
    for split in ("train", "test"):
        assert (tmp_path / f"{split}.jsonl").read_text() == (
            example / "data" / f"{split}.jsonl"
        ).read_text()


def test_guess_number_rows_build_their_environment() -> None:
    rows = [
        json.loads(line)
        for line in (CONFIGS["guess_number"].parent / "data" / "train.jsonl").open()
    ]
    for row in rows:
        env = GuessNumberEnv(row)
        # halving the range finds every target within the config's max_turns (6)
        low, high, turns = env.low, env.high, 0
        while True:
            turns += 1
            guess = (low + high) // 2
            if env.step(str(guess)).done:
                break
            low, high = (guess + 1, high) if guess < env.target else (low, guess - 1)
        assert turns <= 6 and env.rewards() == {"accuracy": 1.0, "format": 0.1}


def test_tool_call_rows_are_answered_by_their_tool() -> None:
    rows = [
        json.loads(line) for line in (CONFIGS["tool_call"].parent / "data" / "test.jsonl").open()
    ]
    for row in rows:
        tool_specs(row["tools"], "tools")  # registered and well formed
        expression = row["question"].removeprefix("What is ").split("?")[0]
        assert calculator(expression) == row["answer"], row


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_taskset_of_the_example_reads(name: str) -> None:
    for reader in readers(CONFIGS[name]):
        assert reader.num_tasks > 0
        task = reader.task_at(0)
        assert (
            task.workflow == load_config(CONFIGS[name]).buffer.explorer_input.default_workflow_type
        )


def test_the_prompt_column_is_checked_only_for_workflows_that_read_it() -> None:
    assert not workflow_reads_prompt("env_workflow")
    assert not workflow_reads_prompt("countdown_workflow")
    assert workflow_reads_prompt("math_workflow")
    assert workflow_reads_prompt("no_such_workflow")  # unknown: the strict side
    # the guess_number rows (no prompt column) under a workflow that reads one
    with pytest.raises(MissingKeyError, match="format.prompt_key"):
        readers(
            CONFIGS["guess_number"],
            **{"buffer.explorer_input.default_workflow_type": "math_workflow"},
        )


@pytest.mark.parametrize(
    ("name", "metric"), [("guess_number", "turns"), ("tool_call", "tool_calls")]
)
def test_one_explore_step_of_the_example(
    name: str, metric: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from trinity.explorer.explorer import Explorer

    cfg = load_config(
        CONFIGS[name],
        [
            f"model.model_path={tiny_model_dir}",
            f"checkpoint_root_dir={tmp_path}",
            "model.dtype=float32",
            "buffer.batch_size=2",
            "algorithm.repeat_times=2",
            "model.max_response_tokens=8",
            "explorer.runner_per_model=2",
        ],
    )
    explorer = Explorer(cfg, model_dir=tiny_model_dir, log_dir=tmp_path / "log")
    try:
        experiences, metrics = explorer.explore_step(1)
    finally:
        explorer.close()
    assert len(experiences) == 4
    assert metrics["rollout/failed_tasks"] == 0
    assert f"rollout/{metric}/mean" in metrics
    for exp in experiences:
        assert exp.action_mask.any()  # the policy's own tokens are trained


def test_an_explorer_that_cannot_read_its_taskset_stops_its_engine(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import threading

    from trinity.explorer.explorer import Explorer

    cfg = load_config(
        CONFIGS["guess_number"],
        [
            f"model.model_path={tiny_model_dir}",
            f"checkpoint_root_dir={tmp_path}",
            "buffer.explorer_input.default_workflow_type=math_workflow",
        ],
    )
    before = set(threading.enumerate())
    with pytest.raises(MissingKeyError, match="format.prompt_key"):
        Explorer(cfg, model_dir=tiny_model_dir, log_dir=tmp_path / "log")
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert left == []
