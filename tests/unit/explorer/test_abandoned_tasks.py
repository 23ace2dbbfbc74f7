"""Tasks abandoned after max_timeout: closed wrappers refuse calls, and a pool caps the
abandoned threads it lets run (its slots rest, then the tasks nobody can start are skipped).

The workflows here never call their model, so the wrappers stand on a bare object: a
closed wrapper must refuse before it touches its engine at all.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from trinity.explorer.runner import RunnerPool
from trinity.rollout.wrapper import ModelClosedError, ModelWrapper
from trinity.types import Experience, Task
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS

HOLD = threading.Event()  # "hold" tasks sleep until it is set


@pytest.fixture(autouse=True)
def release_held_tasks():
    HOLD.clear()
    yield
    HOLD.set()


@WORKFLOWS.register("hold_or_return_test_workflow")
class HoldOrReturnWorkflow(Workflow):
    """``hold`` sleeps until HOLD is set; ``quick`` returns no experience at once."""

    async def run_async(self) -> list[Experience]:
        if self.task.raw["behaviour"] == "hold":
            while not HOLD.is_set():
                time.sleep(0.02)
        return []


def task(index: int, behaviour: str) -> Task:
    return Task(
        raw={"behaviour": behaviour},
        workflow="hold_or_return_test_workflow",
        reward_fn=None,
        taskset="t",
        index=index,
    )


def test_a_closed_wrapper_refuses_every_model_call_before_its_engine():
    wrapper = ModelWrapper(object(), name="m").spawn()  # no engine behind it at all
    wrapper.close()
    messages = [{"role": "user", "content": "hi"}]
    calls = [
        lambda: wrapper.chat(messages),
        lambda: wrapper.generate(["hi"]),
        lambda: wrapper.logprobs([1, 2, 3]),
        lambda: wrapper.top_logprobs([1, 2, 3], 1, k=2),
        lambda: asyncio.run(wrapper.achat(messages)),
        lambda: asyncio.run(wrapper.agenerate(["hi"])),
        lambda: asyncio.run(wrapper.agenerate_ids([1, 2])),
        lambda: asyncio.run(wrapper.aresponse_logprobs([])),
    ]
    for call in calls:
        with pytest.raises(ModelClosedError, match="was closed, so the call was refused"):
            call()
    assert wrapper.closed and wrapper.refused_calls == len(calls)


def test_refused_calls_back_off():
    """A workflow retrying on every error must not spin a core: the n-th refusal waits
    (n - 1) x 0.02 s, so five refusals take at least 0.02 x (0+1+2+3+4) = 0.2 s."""
    wrapper = ModelWrapper(object(), name="m")
    wrapper.close()
    start = time.monotonic()
    for _ in range(5):
        with pytest.raises(ModelClosedError):
            wrapper.generate(["hi"])
    assert time.monotonic() - start >= 0.2


def runner_threads() -> int:
    return sum(t.name.startswith("runner-") and t.is_alive() for t in threading.enumerate())


def test_abandoned_threads_are_capped_and_tasks_skipped_when_every_slot_rests(tmp_path: Path):
    pool = RunnerPool(
        [ModelWrapper(object(), name="m")],
        num_runners=2,
        max_timeout=0.5,
        max_retry_times=0,
        max_abandoned=1,
        log_dir=tmp_path,
    )
    try:
        # both slots hang: the first abandoned thread is tolerated (its slot gets a new
        # thread and runs task 2), the second is over the cap, so its slot rests
        first = pool.run_tasks([task(0, "hold"), task(1, "hold"), task(2, "quick")], 1)
        assert (first.timed_out, first.failed, first.skipped) == (2, 0, 0)
        assert first.abandoned_alive == 2
        # the working slot hangs too and rests: task 4 has no slot; it is skipped at once
        start = time.monotonic()
        second = pool.run_tasks([task(3, "hold"), task(4, "quick")], 2)
        assert (second.timed_out, second.skipped) == (1, 1)
        assert second.abandoned_alive == 3
        assert time.monotonic() - start < 5  # not waiting for the held threads
        # never more than num_runners + max_abandoned workflow threads
        assert runner_threads() <= 3
        third = pool.run_tasks([task(5, "quick")], 3)
        assert (third.timed_out, third.skipped) == (0, 1)
        # once the abandoned threads end, both slots work again
        HOLD.set()
        for _ in range(200):
            if pool.abandoned_running == 0:
                break
            time.sleep(0.02)
        fourth = pool.run_tasks([task(6, "quick"), task(7, "quick")], 4)
        assert (fourth.timed_out, fourth.failed, fourth.skipped) == (0, 0, 0)
        assert fourth.abandoned_alive == 0
    finally:
        pool.close()
    logs = "".join(p.read_text() for p in sorted(tmp_path.glob("explorer_runner_*.log")))
    assert "more than max_abandoned=1: runner slot" in logs
    assert "1 task(s) of this call skipped (first: task 4 of taskset 't')" in logs
    assert "works again" in logs


def test_max_abandoned_must_not_be_negative():
    with pytest.raises(ValueError, match="max_abandoned must be >= 0"):
        RunnerPool(
            [ModelWrapper(object())],
            num_runners=1,
            max_timeout=1,
            max_retry_times=0,
            max_abandoned=-1,
        )
