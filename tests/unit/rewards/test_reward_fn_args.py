"""A taskset's ``reward_fn_args`` reach its reward function, checked by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity.rewards.registry import REWARD_FNS, RewardArgsError, task_reward_fn
from trinity.types import Task

REPO = Path(__file__).resolve().parents[3]


@REWARD_FNS.register("scaled_exact_reward_for_test")
def scaled_exact(response: str, truth: object, scale: float = 1.0) -> dict[str, float]:
    return {"accuracy": scale * float(response.strip() == str(truth))}


def _task(**args: object) -> Task:
    return Task(
        raw={"prompt": "1+1", "response": "2"},
        workflow="math_workflow",
        reward_fn="scaled_exact_reward_for_test",
        taskset="train",
        reward_fn_args=dict(args),
    )


def test_args_are_bound() -> None:
    assert task_reward_fn(_task(scale=3.0), "math_reward")("2", "2") == {"accuracy": 3.0}
    assert task_reward_fn(_task(), "math_reward")("2", "2") == {"accuracy": 1.0}


def test_unknown_argument_names_what_the_function_takes() -> None:
    with pytest.raises(RewardArgsError, match=r"\['weight'\].*'train'.*takes \['scale'\]"):
        task_reward_fn(_task(weight=2), "math_reward")


def test_taskset_config_reaches_the_task(tmp_path: Path) -> None:
    from trinity.config import load_config
    from trinity.explorer.explorer import make_taskset_reader

    config = load_config(
        REPO / "examples/arithmetic/grpo.yaml",
        [f"checkpoint_root_dir={tmp_path}", "buffer.explorer_input.taskset.reward_fn_args.scale=2"],
    )
    storage = config.buffer.explorer_input.taskset
    reader = make_taskset_reader(config, storage, batch_size=2, is_eval=False)
    assert [t.reward_fn_args for t in reader.read_batch()] == [{"scale": 2}, {"scale": 2}]
