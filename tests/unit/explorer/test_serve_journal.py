"""Mode serve's journal and feedback store without a server: real files, a real queue."""

from __future__ import annotations

from pathlib import Path

import torch

from trinity.buffer import ExperienceQueue
from trinity.explorer.serve import FeedbackStore
from trinity.explorer.serve_journal import FeedbackJournal
from trinity.types import Experience


def _exp(token: int) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, token]), prompt_length=2)


def test_the_journal_replays_what_no_commit_cut(tmp_path: Path) -> None:
    path = tmp_path / "serve" / "journal.jsonl"
    journal = FeedbackJournal(path)
    journal.append([_exp(3), _exp(4)])
    journal.append([_exp(5)])
    journal.drop_first(2)
    journal.append([_exp(6)])
    journal.close()
    # a writer killed mid-line leaves a partial last line: cut on the next open
    with open(path, "ab") as f:
        f.write(b'{"tokens": ')
    again = FeedbackJournal(path)
    assert [int(e.tokens[-1]) for e in again.replay()] == [5, 6]
    again.close()


def test_a_restarted_store_commits_the_journal_and_numbers_new_groups_after_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.jsonl"
    first = FeedbackStore(ExperienceQueue(capacity=8), journal=FeedbackJournal(path))
    first.record("call-a", [_exp(3)])
    first.record("call-b", [_exp(4)])
    assert first.feedback(["call-a"], 1.0) == 1  # group 0
    assert first.feedback(["call-b"], 0.0) == 1  # group 1
    # the process dies here: nothing was committed
    buffer = ExperienceQueue(capacity=8)
    second = FeedbackStore(buffer, journal=FeedbackJournal(path))
    assert second.metrics()["rewarded_experiences"] == 2
    second.record("call-c", [_exp(5)])
    second.feedback(["call-c"], 0.5)
    assert second.commit(timeout=5) == 3
    got = buffer.get(3, timeout=1)
    # a group of the new process is not merged into one of the replayed ones
    assert [(e.info["msg_id"], e.eid.task) for e in got] == [
        ("call-a", 0),
        ("call-b", 1),
        ("call-c", 2),
    ]
    assert FeedbackJournal(path).replay() == []  # the commit cut them
