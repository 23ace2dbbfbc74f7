"""Over-rollout in the runner pool: a call cuts its slowest tasks instead of waiting.

The workflow blocks on tasks whose row says ``slow`` until the test releases them, so a
call that waited for them would end only at max_timeout (60 s) with a timeout counted,
never with a cut one.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest
import torch

from trinity.config import ConfigError, load_config
from trinity.explorer.runner import OverRollout, RunnerPool
from trinity.rollout.wrapper import ModelWrapper
from trinity.types import EID, Experience, Task
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS

DEMO = Path(__file__).resolve().parents[3] / "examples" / "arithmetic" / "grpo.yaml"
RELEASE = threading.Event()
CALLS: Counter[int] = Counter()  # task index -> parts started
LOCK = threading.Lock()


class SlowWorkflow(Workflow):
    """One experience per run, reward = task index; ``slow`` rows block until RELEASE,
    ``half`` rows block in every part after the first."""

    async def run_async(self) -> list[Experience]:
        with LOCK:
            CALLS[self.task.index] += 1
            nth = CALLS[self.task.index]
        speed = self.task.raw["speed"]
        if speed == "slow" or (speed == "half" and nth > 1):
            RELEASE.wait(60)
        return [
            Experience(
                tokens=torch.tensor([1, 2]), prompt_length=1, reward=self.task.index, eid=EID(run=r)
            )
            for r in range(self.task.repeat_times)
        ]


@pytest.fixture
def pool():
    WORKFLOWS.register("over_rollout_test_workflow")(SlowWorkflow)
    RELEASE.clear()
    CALLS.clear()
    pools = []

    def make(**kwargs) -> RunnerPool:
        kwargs = {"num_runners": 4, "max_timeout": 60, "max_retry_times": 0, **kwargs}
        pools.append(RunnerPool([ModelWrapper(object(), name="m")], **kwargs))
        return pools[-1]

    yield make
    RELEASE.set()
    for p in pools:
        p.close()
    WORKFLOWS._items.pop("over_rollout_test_workflow", None)


def tasks(*speeds: str, repeat_times: int = 2) -> list[Task]:
    return [
        Task(
            raw={"speed": speed},
            workflow="over_rollout_test_workflow",
            reward_fn=None,
            repeat_times=repeat_times,
            taskset="t",
            index=i,
        )
        for i, speed in enumerate(speeds)
    ]


def test_the_call_ends_without_its_slow_task(pool) -> None:
    runners = pool()
    rule = OverRollout(enough=3, wait_s=0.2)
    result = runners.run_tasks(tasks("fast", "slow", "fast", "fast"), batch_id=1, over_rollout=rule)
    assert (result.cut, result.partial, result.timed_out) == (1, 0, 0)
    assert [e.eid.task for e in result.experiences] == [0, 0, 2, 2, 3, 3]
    assert runners.abandoned_running == 1  # the cut task's thread, still blocked


def test_without_over_rollout_the_call_waits_for_every_task(pool) -> None:
    runners = pool()
    threading.Timer(0.5, RELEASE.set).start()
    result = runners.run_tasks(tasks("fast", "slow", "fast", "fast"), batch_id=1)
    assert (result.cut, result.timed_out) == (0, 0)
    assert [e.eid.task for e in result.experiences] == [0, 0, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("keep_partial", [True, False])
def test_a_cut_task_keeps_its_finished_runs_only_when_asked(pool, keep_partial: bool) -> None:
    # task 0 runs as two parts of 2 runs; its second part blocks, task 1 finishes
    runners = pool(max_repeat_times_per_runner=2)
    rule = OverRollout(enough=1, wait_s=0.2, keep_partial=keep_partial)
    result = runners.run_tasks(tasks("half", "fast", repeat_times=4), batch_id=1, over_rollout=rule)
    assert result.cut == 1
    kept = [e for e in result.experiences if e.eid.task == 0]
    assert [e.eid.task for e in result.experiences if e.eid.task == 1] == [1, 1, 1, 1]
    if keep_partial:
        assert result.partial == 1
        assert len(kept) == 2  # the runs of the part that finished, 0-1 or 2-3
        assert {e.eid.run for e in kept} in ({0, 1}, {2, 3})
    else:
        assert (result.partial, kept) == (0, [])


def test_a_rule_met_by_every_task_cuts_nothing(pool) -> None:
    runners = pool()
    rule = OverRollout(enough=2, wait_s=30)
    result = runners.run_tasks(tasks("fast", "fast"), batch_id=1, over_rollout=rule)
    assert (result.cut, len(result.experiences)) == (0, 4)


@pytest.mark.parametrize("ratio", [1.0, -0.1])
def test_a_ratio_outside_zero_to_one_is_refused_by_its_key(ratio: float) -> None:
    with pytest.raises(ConfigError, match=r"^explorer\.over_rollout\.ratio: must lie in \[0, 1\)"):
        load_config(DEMO, [f"explorer.over_rollout.ratio={ratio}"])
