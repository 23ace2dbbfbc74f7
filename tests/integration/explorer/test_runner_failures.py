"""One workflow raises, one hangs past max_timeout, the rest succeed: the step completes.

The explorer runs in-process with the tiny model. Metrics count exactly one failure and
one timeout, the runner log holds the traceback, and the hung thread (still blocked in
the background) neither starves later steps nor leaks into their results.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from behaviour_workflow import RELEASE, behaviour_config, behaviour_task, write_tasks

from trinity.explorer.explorer import Explorer
from trinity.explorer.runner import RunnerPool
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.wrapper import ModelWrapper
from trinity.types import Experience, Task
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS


def test_step_with_a_failure_and_a_timeout_completes(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_tasks(data, "train", ["ok", "raise", "ok", "hang", "ok", "ok"])
    write_tasks(data, "test", ["ok"])
    config = behaviour_config(
        tiny_model_dir,
        tmp_path,
        data,
        "buffer.batch_size=6",
        "explorer.runner_per_model=2",
        "explorer.max_timeout=4",
        "explorer.max_retry_times=1",
    )
    explorer = Explorer(config, model_dir=tiny_model_dir, log_dir=tmp_path / "log")
    try:
        start = time.monotonic()
        experiences, metrics = explorer.explore_step(1)
        elapsed = time.monotonic() - start
        assert metrics["rollout/failed_tasks"] == 1
        assert metrics["rollout/timed_out_tasks"] == 1
        # the four good tasks, repeat_times 2 each, in task order
        assert len(experiences) == 8
        assert [e.eid.task for e in experiences] == [0, 0, 2, 2, 4, 4, 5, 5]
        assert metrics["rollout/num_experiences"] == 8
        # the hung task was abandoned at its own deadline, not waited for
        assert elapsed < 60
        assert explorer.runners.abandoned_running == 1
    finally:
        explorer.close()
    logs = "".join(p.read_text() for p in sorted((tmp_path / "log").glob("explorer_runner_*.log")))
    assert logs.count("Traceback (most recent call last)") == 2  # the failing task's two tries
    assert "DeliberateFailure: task 1 fails on purpose" in logs
    assert "try 2 of 2" in logs
    assert "task 3 of taskset 'arithmetic' timed out after 4s" in logs


def test_hung_runner_slot_is_replaced(tiny_model_dir: Path, tmp_path: Path) -> None:
    """One runner: a hung task must not block the next call, nor leak into it."""
    engine = TransformersEngine(str(tiny_model_dir), dtype="float32")
    pool = RunnerPool(
        [ModelWrapper(engine)], num_runners=1, max_timeout=2, max_retry_times=0, log_dir=tmp_path
    )

    def task(index: int, behaviour: str) -> Task:
        return behaviour_task(index, behaviour, max_tokens=3)

    try:
        first = pool.run_tasks([task(0, "hang")], batch_id=1)
        assert (first.timed_out, first.failed, first.experiences) == (1, 0, [])
        # the only slot's old thread is still blocked; the slot has a new one
        second = pool.run_tasks([task(1, "ok"), task(2, "ok")], batch_id=2)
        assert (second.timed_out, second.failed) == (0, 0)
        assert [e.eid.task for e in second.experiences] == [1, 2]
        assert pool.abandoned_running == 1
        RELEASE.set()  # the abandoned workflow now returns; nobody reads its result
        third = pool.run_tasks([task(3, "ok")], batch_id=3)
        assert [e.eid.batch for e in third.experiences] == [3]
        for _ in range(100):
            if pool.abandoned_running == 0:
                break
            time.sleep(0.05)
        assert pool.abandoned_running == 0
    finally:
        pool.close()
        engine.close()


class RecordingEngine(TransformersEngine):
    """The tiny engine, noting which thread sent each request and when."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[tuple[threading.Thread, float]] = []  # (sender, time.monotonic())

    def submit(self, prompts, params):
        self.requests.append((threading.current_thread(), time.monotonic()))
        return super().submit(prompts, params)

    def compute_logprobs(self, token_ids, prompt_lengths, temperature=1.0):
        self.requests.append((threading.current_thread(), time.monotonic()))
        return super().compute_logprobs(token_ids, prompt_lengths, temperature)


HUNG_THREADS: dict[str, threading.Thread] = {}  # behaviour -> the thread that ran it


@WORKFLOWS.register("hang_forever_test_workflow")
class HangForeverWorkflow(Workflow):
    """``loop``: calls the model (chat, then logprobs) again and again, forever;
    ``sleep``: sleeps until the test ends; ``ok``: one short chat call."""

    async def run_async(self) -> list[Experience]:
        behaviour = self.task.raw["behaviour"]
        messages = [{"role": "user", "content": self.task.prompt}]
        if behaviour == "ok":
            return await self.model.achat(messages, max_tokens=2)
        HUNG_THREADS[behaviour] = threading.current_thread()
        while behaviour == "loop":
            [exp] = await self.model.achat(messages, max_tokens=2)
            self.model.logprobs(exp.tokens)
        while not RELEASE.is_set():
            time.sleep(0.05)
        return []


def test_tasks_that_hang_forever_are_cut_off_at_their_timeout(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A task looping on model calls and one sleeping: the step ends at max_timeout, the
    looping thread's later calls never reach the engine (it ends on the refusal), and the
    next step runs at full width with only its own requests on the engine."""
    engine = RecordingEngine(str(tiny_model_dir), dtype="float32")
    max_timeout = 3.0
    pool = RunnerPool(
        [ModelWrapper(engine)],
        num_runners=2,
        max_timeout=max_timeout,
        max_retry_times=1,
        log_dir=tmp_path,
    )
    workflow = "hang_forever_test_workflow"
    HUNG_THREADS.clear()
    try:
        start = time.monotonic()
        first = pool.run_tasks(
            [behaviour_task(i, b, workflow) for i, b in enumerate(["loop", "sleep", "ok"])], 1
        )
        returned = time.monotonic()
        assert (first.timed_out, first.failed, first.skipped) == (2, 0, 0)
        assert [e.eid.task for e in first.experiences] == [2]
        # the step waited for the deadline and no longer (the generous margin is the
        # third task, run after the first two were abandoned)
        assert max_timeout <= returned - start < max_timeout + 20
        # the looping thread ends on its first refused call (and starts no second try);
        # the sleeping one runs on
        for _ in range(200):
            if pool.abandoned_running == 1:
                break
            time.sleep(0.05)
        assert pool.abandoned_running == 1
        loop_thread = HUNG_THREADS["loop"]
        assert any(ident == loop_thread for ident, _ in engine.requests)  # it did call
        assert not [t for ident, t in engine.requests if ident == loop_thread and t > returned]
        assert pool.refused_calls == 1

        seen = len(engine.requests)
        second = pool.run_tasks([behaviour_task(i, "ok", workflow) for i in (3, 4)], 2)
        assert (second.timed_out, second.failed, second.skipped) == (0, 0, 0)
        assert [e.eid.task for e in second.experiences] == [3, 4]
        assert (second.abandoned_alive, second.refused_calls) == (1, 0)
        # the engine served the second step's two calls and nothing else
        assert len(engine.requests) - seen == 2
        assert not {sender for sender, _ in engine.requests[seen:]} & set(HUNG_THREADS.values())
    finally:
        RELEASE.set()
        pool.close()
        engine.close()
    logs = "".join(p.read_text() for p in sorted(tmp_path.glob("explorer_runner_*.log")))
    assert "its model calls are refused from now on" in logs
    assert "abandoned task 0 of taskset 't' ended with ModelClosedError" in logs
    assert "try 2 of 2" not in logs  # an abandoned task is not retried
