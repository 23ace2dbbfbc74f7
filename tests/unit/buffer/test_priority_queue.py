"""PriorityExperienceQueue: freshest first, decay with use, cooldown reuse, eviction, close."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from buffer_testing import wait_until_blocked

from trinity.buffer import PriorityExperienceQueue, QueueClosed, SQLExperienceStorage
from trinity.types import EID, Experience


def exp(name: str, version: int) -> Experience:
    return Experience(
        tokens=torch.tensor([1, 2, 3]),
        prompt_length=1,
        prompt_text=name,
        info={"model_version": version},
    )


def names(exps: list[Experience]) -> list[str | None]:
    return [e.prompt_text for e in exps]


class Clock:
    """A hand-moved clock: reuse times are checked without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_newest_model_version_first_and_fifo_among_equals() -> None:
    q = PriorityExperienceQueue()
    q.put([exp("a", 0), exp("b", 2), exp("c", 1), exp("d", 2)])
    assert names(q.get(4)) == ["b", "d", "c", "a"]


def test_without_cooldown_nothing_is_reused() -> None:
    q = PriorityExperienceQueue(reuse_cooldown_time=None)
    q.put([exp("a", 1), exp("b", 0)])
    assert names(q.get(1)) == ["a"]
    assert names(q.get(5, timeout=0)) == ["b"]
    assert q.get(5, timeout=0) == []
    assert q.qsize() == 0


def test_reuse_after_cooldown_with_priority_decaying_by_use_count() -> None:
    clock = Clock()
    q = PriorityExperienceQueue(reuse_cooldown_time=10, clock=clock)
    q.put([exp("a", 1), exp("b", 0)])
    assert names(q.get(1, timeout=0)) == ["a"]  # a: 1 - 0 uses = 1 beats b: 0
    assert names(q.get(1, timeout=0)) == ["b"]  # a is cooling down until t = 10
    clock.now = 9.9
    assert q.get(2, timeout=0) == []
    clock.now = 10
    # a: 1 - 1 use = 0 beats b: 0 - 1 use = -1
    assert names(q.get(2, timeout=0)) == ["a", "b"]
    clock.now = 20
    q.put([exp("c", 0)])
    # c: 0 - 0 = 0 beats a: 1 - 2 = -1 and b: 0 - 2 = -2
    assert names(q.get(3, timeout=0)) == ["c", "a", "b"]
    assert q.qsize() == 3  # all held for reuse


def test_get_waits_for_the_cooldown_to_end() -> None:
    q = PriorityExperienceQueue(reuse_cooldown_time=0.2)
    q.put([exp("a", 0)])
    assert names(q.get(1)) == ["a"]
    began = time.monotonic()
    assert names(q.get(1, timeout=5)) == ["a"]
    assert 0.15 <= time.monotonic() - began < 2


def test_full_queue_evicts_the_lowest_priority() -> None:
    q = PriorityExperienceQueue(capacity=3)
    q.put([exp("v5", 5), exp("v1", 1), exp("v3", 3)])
    q.put([exp("v4", 4)])  # never blocks: v1, the stalest, goes
    assert q.evicted == 1 and q.qsize() == 3
    assert names(q.get(3)) == ["v5", "v4", "v3"]


def test_reused_reads_are_copies() -> None:
    q = PriorityExperienceQueue(reuse_cooldown_time=0)
    q.put([exp("a", 0)])
    first = q.get(1)[0]
    first.reward = 5.0
    assert q.get(1)[0].reward is None


def test_close_stops_reuse_drains_and_refuses_puts() -> None:
    clock = Clock()
    q = PriorityExperienceQueue(reuse_cooldown_time=10, clock=clock)
    q.put([exp("a", 1), exp("b", 0)])
    assert names(q.get(1, timeout=0)) == ["a"]
    q.close()
    with pytest.raises(QueueClosed):
        q.put([exp("c", 0)])
    assert names(q.get(5)) == ["b"]  # ready ones drain; a (cooling) is dropped
    with pytest.raises(QueueClosed):
        q.get(1)


def test_close_wakes_a_waiting_reader() -> None:
    q = PriorityExperienceQueue()
    box: dict = {}

    def read() -> None:
        try:
            q.get(3)
        except QueueClosed as exc:
            box["error"] = exc

    thread = threading.Thread(target=read)
    thread.start()
    wait_until_blocked(thread)
    q.close()
    thread.join(5)
    assert isinstance(box.get("error"), QueueClosed)


def test_concurrent_writers_and_backup(tmp_path: Path) -> None:
    backup = SQLExperienceStorage(str(tmp_path / "backup.db"))
    q = PriorityExperienceQueue(capacity=100_000, backup=backup)
    writers, per_writer = 4, 250

    def write(w: int) -> None:
        for i in range(0, per_writer, 5):
            batch = [
                Experience(tokens=torch.tensor([1, 2]), prompt_length=1, eid=EID(task=w, run=j))
                for j in range(i, i + 5)
            ]
            q.put(batch)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    got: list[Experience] = []
    while len(got) < writers * per_writer:
        got += q.get(50, timeout=5)
    for t in threads:
        t.join(5)
    keys = {(e.eid.task, e.eid.run) for e in got}
    assert len(got) == len(keys) == writers * per_writer
    q.close()
    check = SQLExperienceStorage(str(tmp_path / "backup.db"))
    assert check.count() == writers * per_writer
    check.close()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="capacity"):
        PriorityExperienceQueue(capacity=0)
    with pytest.raises(ValueError, match="reuse_cooldown_time"):
        PriorityExperienceQueue(reuse_cooldown_time=-1)
    with pytest.raises(ValueError, match="n >= 1"):
        PriorityExperienceQueue().get(0)


@pytest.mark.parametrize(("decay", "order"), [(2.0, ["b", "a"]), (0.5, ["a", "b"])])
def test_replay_buffer_config_orders_by_linear_decay_after_the_cooldown(decay, order) -> None:
    """``replay_buffer`` as a Trinity-RFT config writes it, through config loading."""
    from trinity.buffer import make_experience_buffer
    from trinity.config import load_config

    demo = Path(__file__).resolve().parents[3] / "examples" / "arithmetic" / "grpo.yaml"
    key = "buffer.trainer_input.experience_buffer.replay_buffer"
    config = load_config(
        demo,
        [
            "model.model_path=tiny",
            f"{key}.enable=true",
            f"{key}.reuse_cooldown_time=0.05",
            f"{key}.priority_fn_args.decay={decay}",
        ],
    )
    q = make_experience_buffer(config.buffer.trainer_input.experience_buffer)
    assert isinstance(q, PriorityExperienceQueue) and q.reuse_cooldown_time == 0.05
    q.put([exp("a", 1), exp("b", 0)])
    assert names(q.get(1, timeout=0)) == ["a"]  # freshest first
    # get waits until a is back: a (read once) = 1 - decay against b (never read) = 0;
    # decay 2: a = -1 < 0, decay 0.5: a = 0.5 > 0
    assert names(q.get(2, timeout=10)) == order
    q.close()


class ScriptedNoise:
    """Stands in for random.Random: gauss returns the next scripted value."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)
        self.sigmas: list[float] = []

    def gauss(self, mu: float, sigma: float) -> float:
        self.sigmas.append(sigma)
        return self.values.pop(0)


def test_use_count_limit_drops_an_experience_after_that_many_reads() -> None:
    clock = Clock()
    q = PriorityExperienceQueue(reuse_cooldown_time=5, use_count_limit=2, clock=clock)
    q.put([exp("a", 0)])
    assert names(q.get(1, timeout=0)) == ["a"]  # read 1 < limit 2: back after the cooldown
    assert q.qsize() == 1
    clock.now = 5
    assert names(q.get(1, timeout=0)) == ["a"]  # read 2 = limit: not put back
    assert q.qsize() == 0
    clock.now = 10
    assert q.get(1, timeout=0) == []


def test_priority_noise_is_drawn_at_each_insertion() -> None:
    clock = Clock()
    noise = ScriptedNoise(3.0, -0.5, 0.0, 0.0, 0.0)
    q = PriorityExperienceQueue(
        reuse_cooldown_time=1, use_count_weight=2.0, priority_sigma=1.5, rng=noise, clock=clock
    )
    # a: version 0 + 3.0 = 3.0 beats b: version 2 - 0.5 = 1.5, though b is fresher
    q.put([exp("a", 0), exp("b", 2)])
    assert names(q.get(1, timeout=0)) == ["a"]
    clock.now = 1
    # a was put back with fresh noise: 0 - 2.0 * 1 read + 0.0 = -2.0, below b's 1.5
    assert names(q.get(2, timeout=0)) == ["b", "a"]
    assert noise.sigmas == [1.5] * 5  # 2 puts, then 3 reads each put the read one back


def test_replay_buffer_decay_limit_randomization_from_the_config() -> None:
    """Trinity-RFT's priority_fn with its arguments, through config loading."""
    from trinity.buffer import make_experience_buffer
    from trinity.config import ConfigError, load_config

    demo = Path(__file__).resolve().parents[3] / "examples" / "arithmetic" / "grpo.yaml"
    key = "buffer.trainer_input.experience_buffer.replay_buffer"
    setup = ["model.model_path=tiny", f"{key}.enable=true"]
    config = load_config(
        demo,
        [
            *setup,
            f"{key}.priority_fn=decay_limit_randomization",
            f"{key}.priority_fn_args={{decay: 1.0, sigma: 0.5}}",
        ],
    )
    q = make_experience_buffer(config.buffer.trainer_input.experience_buffer)
    assert isinstance(q, PriorityExperienceQueue)
    # use_count_limit is not given: Trinity-RFT's default of 3 reads
    assert (q.use_count_weight, q.use_count_limit, q.priority_sigma) == (1.0, 3, 0.5)
    q.close()
    with pytest.raises(ConfigError, match="priority_fn_args"):
        load_config(demo, [*setup, f"{key}.priority_fn_args={{decay: 2.0, sigma: 1.0}}"])
    with pytest.raises(ConfigError, match="sigma"):
        load_config(
            demo,
            [
                *setup,
                f"{key}.priority_fn=decay_limit_randomization",
                f"{key}.priority_fn_args={{sigma: -1.0}}",
            ],
        )
