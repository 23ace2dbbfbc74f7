"""TasksetReader: batching over epochs and steps, selectors, resume, Task fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from buffer_testing import RolloutArgs, storage_config

from trinity.buffer import (
    MissingKeyError,
    SQLTaskStorage,
    TasksetExhausted,
    TasksetReader,
)


def make_taskset(tmp_path: Path, n: int) -> str:
    rows = [{"prompt": f"q{i}", "response": str(i)} for i in range(n)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(tmp_path)


def reader(path: str, **kwargs) -> TasksetReader:
    kwargs.setdefault("batch_size", 2)
    cfg_fields = kwargs.pop("cfg", {})
    return TasksetReader(
        storage_config(path=path, **cfg_fields), default_workflow="math_workflow", **kwargs
    )


def indices(batches) -> list[list[int]]:
    return [[t.index for t in batch] for batch in batches]


def test_sequential_epochs_run_across_batches(tmp_path: Path) -> None:
    r = reader(make_taskset(tmp_path, 5), batch_size=2, total_epochs=2)
    # 2 epochs x 5 tasks = 10 positions, cut into batches of 2
    assert len(r) == 5
    assert indices(r) == [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4]]
    with pytest.raises(TasksetExhausted, match="after 5 batches"):
        r.read_batch()


def test_last_batch_may_be_short(tmp_path: Path) -> None:
    r = reader(make_taskset(tmp_path, 5), batch_size=2, total_epochs=1)
    assert len(r) == 3  # ceil(5 / 2)
    assert indices(r) == [[0, 1], [2, 3], [4]]


def test_total_steps_overrides_epochs(tmp_path: Path) -> None:
    r = reader(make_taskset(tmp_path, 5), batch_size=3, total_epochs=1, total_steps=4)
    # 4 steps x 3 tasks = 12 positions: the taskset is cycled 2.4 times
    assert len(r) == 4
    assert indices(r) == [[0, 1, 2], [3, 4, 0], [1, 2, 3], [4, 0, 1]]
    with pytest.raises(TasksetExhausted):
        r.read_batch()


def test_shuffle_is_a_seeded_permutation_per_epoch(tmp_path: Path) -> None:
    path = make_taskset(tmp_path, 8)
    order = indices(reader(path, batch_size=8, total_epochs=3, selector="shuffle", seed=7))
    again = indices(reader(path, batch_size=8, total_epochs=3, selector="shuffle", seed=7))
    other = indices(reader(path, batch_size=8, total_epochs=3, selector="shuffle", seed=8))
    assert order == again
    assert order != other
    for epoch in order:
        assert sorted(epoch) == list(range(8))
    assert order[0] != order[1]  # reshuffled each epoch
    assert order[0] != list(range(8))


def test_random_draws_with_replacement_reproducibly(tmp_path: Path) -> None:
    path = make_taskset(tmp_path, 20)
    order = indices(reader(path, batch_size=20, total_epochs=2, selector="random", seed=3))
    assert order == indices(reader(path, batch_size=20, total_epochs=2, selector="random", seed=3))
    flat = [i for batch in order for i in batch]
    assert all(0 <= i < 20 for i in flat)
    # 20 draws from 20 rows repeat one with probability 1 - 20!/20**20 (about 1 - 2e-8)
    assert len(set(order[0])) < 20


@pytest.mark.parametrize("selector", ["sequential", "shuffle", "random"])
def test_state_dict_resumes_at_the_next_batch(tmp_path: Path, selector: str) -> None:
    path = make_taskset(tmp_path, 7)
    first = reader(path, batch_size=3, total_epochs=3, selector=selector, seed=11)
    for _ in range(3):  # 9 positions: past the first epoch boundary
        first.read_batch()
    state = json.loads(json.dumps(first.state_dict()))  # survives being written to disk
    rest = indices(first)

    resumed = reader(path, batch_size=3, total_epochs=3, selector=selector, seed=11)
    resumed.load_state_dict(state)
    assert resumed.epoch == 1
    assert indices(resumed) == rest
    assert len(rest) == len(first) - 3


def test_task_fields(tmp_path: Path) -> None:
    cfg = {
        "name": "countdown_train",
        "repeat_times": 4,
        "rollout_args": RolloutArgs(temperature=0.7, max_tokens=64),
        "default_reward_fn_type": "countdown_reward",
        "workflow_args": {"use_tools": True},
        "is_eval": False,
    }
    r = reader(make_taskset(tmp_path, 3), batch_size=2, cfg=cfg)
    task = r.read_batch()[1]
    assert task.raw == {"prompt": "q1", "response": "1"}
    assert task.prompt == "q1" and task.answer == "1"
    assert task.workflow == "math_workflow"  # the taskset names none: the default
    assert task.reward_fn == "countdown_reward"
    assert task.repeat_times == 4
    assert task.taskset == "countdown_train"
    assert task.index == 1
    assert task.rollout_args == {
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": -1,
        "logprobs": 0,
        "max_tokens": 64,
    }
    assert task.format["prompt_key"] == "prompt" and task.format["response_key"] == "response"
    assert task.workflow_args == {"use_tools": True}
    # tasks get copies: a workflow editing its task does not change the taskset
    task.raw["prompt"] = "changed"
    task.workflow_args["use_tools"] = False
    assert r.read_all()[1].raw["prompt"] == "q1"
    assert r.read_all()[1].workflow_args == {"use_tools": True}


def test_taskset_workflow_overrides_default(tmp_path: Path) -> None:
    r = TasksetReader(
        storage_config(path=make_taskset(tmp_path, 2), default_workflow_type="tool_workflow"),
        batch_size=1,
        default_workflow="math_workflow",
        default_reward_fn="math_reward",
    )
    task = r.read_batch()[0]
    assert task.workflow == "tool_workflow" and task.reward_fn == "math_reward"
    assert task.repeat_times == 1  # unset repeat_times means one rollout


def test_read_all_for_eval(tmp_path: Path) -> None:
    r = reader(make_taskset(tmp_path, 5), cfg={"is_eval": True, "split": "train"})
    r.read_batch()
    tasks = r.read_all()
    assert [t.index for t in tasks] == [0, 1, 2, 3, 4]
    assert all(t.is_eval for t in tasks)
    assert r.position == 2  # read_all does not move the stream


def test_split_and_subset_are_passed_to_the_file_reader(tmp_path: Path) -> None:
    (tmp_path / "main").mkdir()
    (tmp_path / "main" / "test.jsonl").write_text(json.dumps({"prompt": "t", "response": 1}))
    r = reader(str(tmp_path), cfg={"split": "test", "subset_name": "main"})
    assert r.read_all()[0].raw == {"prompt": "t", "response": 1}


def test_missing_prompt_key_is_reported(tmp_path: Path) -> None:
    path = make_taskset(tmp_path, 2)
    cfg = storage_config(path=path, prompt_key="question")
    with pytest.raises(MissingKeyError) as err:
        TasksetReader(cfg, batch_size=1, default_workflow="math_workflow")
    msg = str(err.value)
    assert "train.jsonl, line 1" in msg and "'question'" in msg and "format.prompt_key" in msg
    assert "['prompt', 'response']" in msg


def test_messages_prompt_type_requires_messages_key(tmp_path: Path) -> None:
    cfg = storage_config(path=make_taskset(tmp_path, 2))
    cfg.format.prompt_type = "messages"
    with pytest.raises(MissingKeyError, match="format.messages_key"):
        TasksetReader(cfg, batch_size=1, default_workflow="math_workflow")


def test_sql_taskset(tmp_path: Path) -> None:
    db = str(tmp_path / "tasks.db")
    storage = SQLTaskStorage(db)
    storage.write_rows([{"prompt": "a", "response": "1"}, {"prompt": "b", "response": "2"}])
    storage.close()
    r = reader(db, batch_size=2, cfg={"storage_type": "sql"})
    assert [t.raw["prompt"] for t in r.read_batch()] == ["a", "b"]


def test_sql_taskset_missing_key(tmp_path: Path) -> None:
    db = str(tmp_path / "tasks.db")
    storage = SQLTaskStorage(db)
    storage.write_rows([{"prompt": "a"}, {"text": "b"}])
    storage.close()
    with pytest.raises(MissingKeyError, match=r"task row 1 \(0-based\).*\['text'\]"):
        reader(db, cfg={"storage_type": "sql"})


def test_bad_arguments(tmp_path: Path) -> None:
    path = make_taskset(tmp_path, 2)
    with pytest.raises(ValueError, match="unknown task selector 'shufle'"):
        reader(path, selector="shufle")
    with pytest.raises(ValueError, match="storage_type 'queue' cannot hold a taskset"):
        reader(path, cfg={"storage_type": "queue"})
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "train.jsonl").write_text("")
    with pytest.raises(ValueError, match="has no rows"):
        reader(str(tmp_path / "empty"))
