"""A reward function that raises: the rollout is counted and logged, the task goes on.

``math_workflow`` on the tiny model, three rollouts, scored by a reward function that
raises on its first call: the task does not fail, the other two rollouts are scored,
the broken one gets reward 0 and ``info["reward_error"]``, ``rollout/reward_errors``
counts it, and the runner's log holds its traceback.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from trinity.explorer.metrics import rollout_metrics
from trinity.explorer.runner import RunnerPool
from trinity.rewards.registry import REWARD_FNS
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.wrapper import ModelWrapper
from trinity.types import Task

CALLS = itertools.count()


class BrokenReward(RuntimeError):
    pass


@REWARD_FNS.register("first_call_raises_test_reward")
def first_call_raises(response: str, truth: object) -> dict[str, float]:
    if next(CALLS) == 0:
        raise BrokenReward("the reward service is down")
    return {"accuracy": 1.0}


def test_a_raising_reward_function_is_counted_and_logged(tiny_model_dir: Path, tmp_path: Path):
    engine = TransformersEngine(str(tiny_model_dir), dtype="float32")
    pool = RunnerPool(
        [ModelWrapper(engine)], num_runners=1, max_timeout=120, max_retry_times=1, log_dir=tmp_path
    )
    task = Task(
        raw={"question": "1 + 1 = ?", "answer": "2"},
        workflow="math_workflow",
        reward_fn="first_call_raises_test_reward",
        repeat_times=3,
        taskset="t",
        index=7,
        rollout_args={"max_tokens": 3},
        format={"prompt_key": "question", "response_key": "answer"},
    )
    try:
        result = pool.run_tasks([task], batch_id=1)
    finally:
        pool.close()
        engine.close()
    assert (result.failed, result.retries) == (0, 0)
    assert [e.reward for e in result.experiences] == [0.0, 1.0, 1.0]
    broken = result.experiences[0]
    assert broken.info["reward_error"] == "BrokenReward: the reward service is down"
    assert "reward/accuracy" not in broken.metrics
    assert all("reward_error" not in e.info for e in result.experiences[1:])
    metrics = rollout_metrics(result.experiences)
    assert metrics["rollout/reward_errors"] == 1
    assert metrics["rollout/reward/accuracy/mean"] == 1.0  # over the scored rollouts
    log = (tmp_path / "explorer_runner_0.log").read_text()
    assert "reward function of task 7 of taskset 't' raised; the rollout gets reward 0" in log
    assert "Traceback (most recent call last)" in log
    assert "BrokenReward: the reward service is down" in log
