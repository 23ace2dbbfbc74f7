"""The priority queue marks each read with the number of earlier reads (``use_count``),
which the trainer counts as ``batch/replayed``."""

from __future__ import annotations

import torch

from trinity.buffer import PriorityExperienceQueue
from trinity.types import Experience


def exp(name: str) -> Experience:
    return Experience(
        tokens=torch.tensor([1, 2, 3]), prompt_length=1, prompt_text=name, info={"model_version": 0}
    )


def reads(got: list[Experience]) -> dict[str | None, int]:
    return {e.prompt_text: e.info["use_count"] for e in got}


def test_each_read_of_a_reused_experience_counts_the_reads_before_it() -> None:
    held = [exp("a"), exp("b")]
    q = PriorityExperienceQueue(reuse_cooldown_time=0, use_count_limit=3)
    q.put(held)
    assert reads(q.get(2, timeout=0)) == {"a": 0, "b": 0}
    assert reads(q.get(2, timeout=0)) == {"a": 1, "b": 1}
    assert reads(q.get(2, timeout=0)) == {"a": 2, "b": 2}
    assert q.get(2, timeout=0) == []  # read use_count_limit = 3 times: gone
    # the marks are on the copies handed out, never on the experiences that were put
    assert [e.info for e in held] == [{"model_version": 0}, {"model_version": 0}]


def test_without_reuse_an_experience_is_read_once_and_unmarked() -> None:
    held = exp("a")
    q = PriorityExperienceQueue()
    q.put([held])
    [got] = q.get(1, timeout=0)
    assert got is held and "use_count" not in got.info
    assert q.get(1, timeout=0) == []
