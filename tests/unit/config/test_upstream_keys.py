"""Keys of Trinity-RFT v0.6 configs: each is accepted and acts as upstream's, or is reported
as without effect. The effects are checked through the component that reads the key."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import torch
from config_testing import minimal_config

from trinity.buffer.task_reader import TasksetReader
from trinity.config import ConfigError, config_from_dict, resolve, validate
from trinity.config.no_effect import set_without_effect
from trinity.explorer.runner import RunnerPool, split_repeats
from trinity.pipeline import ExperiencePipeline
from trinity.rollout.wrapper import ModelWrapper
from trinity.types import EID, Experience, Task
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS


def _config(tmp_path: Path, **sections: dict[str, Any]) -> Any:
    """The config as written (what set_without_effect reads)."""
    data = minimal_config(tmp_path)
    for name, section in sections.items():
        data.setdefault(name, {}).update(section)
    return config_from_dict(data)


def _resolved(tmp_path: Path, **sections: dict[str, Any]) -> Any:
    cfg = resolve(_config(tmp_path, **sections), now=datetime(2024, 1, 1))
    validate(cfg)
    return cfg


def _taskset(tmp_path: Path, selector: dict[str, Any]) -> dict[str, Any]:
    taskset = {"name": "tasks", "path": "/data/tasks", "data_selector": selector}
    return {"batch_size": 2, "explorer_input": {"taskset": taskset}}


def test_data_selector_sets_the_order_the_reader_reads(tmp_path: Path) -> None:
    rows = tmp_path / "tasks.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(6)))
    cfg = _resolved(tmp_path, buffer=_taskset(tmp_path, {"selector_type": "shuffle", "seed": 7}))
    storage = cfg.buffer.explorer_input.taskset
    assert storage.task_selector == "shuffle"
    storage.path = str(rows)

    def order(seed: int) -> list[int]:
        reader = TasksetReader(
            storage, batch_size=6, seed=seed, selector="shuffle", default_workflow="math_workflow"
        )
        return [t.index for t in reader.read_batch()]

    from trinity.explorer.explorer import make_taskset_reader

    reader = make_taskset_reader(cfg, storage, batch_size=6, is_eval=False)
    # the section's seed, not the run's (42), orders the tasks
    assert [t.index for t in reader.read_batch()] == order(7) != order(42)


def test_difficulty_based_reaches_the_explorers_reader_with_its_keys(tmp_path: Path) -> None:
    from trinity.explorer.explorer import make_taskset_reader

    rows = tmp_path / "tasks.jsonl"
    rows.write_text("".join(json.dumps({"prompt": "q", "pass_rate": p}) + "\n" for p in (0, 1)))
    selector = {
        "selector_type": "difficulty_based",
        "feature_keys": ["pass_rate"],
        "kwargs": {"target_reward": 0.5, "tau": 0},
    }
    cfg = _config(tmp_path, buffer=_taskset(tmp_path, selector))
    assert set_without_effect(cfg) == []
    resolved = _resolved(tmp_path, buffer=_taskset(tmp_path, selector))
    storage = resolved.buffer.explorer_input.taskset
    storage.path = str(rows)
    reader = make_taskset_reader(resolved, storage, batch_size=2, is_eval=False)
    assert reader.selector == "difficulty_based"
    assert reader.difficulty.settings.tau == 0


@pytest.mark.parametrize(
    ("old", "new"),
    [("dynamic_by_trainer", "trainer_driven"), ("dynamic_by_explorer", "explorer_driven")],
)
def test_old_sync_style_names(tmp_path: Path, old: str, new: str) -> None:
    cfg = _resolved(tmp_path, synchronizer={"sync_style": old})
    assert cfg.synchronizer.sync_style == new


def test_trainer_strategy_megatron_fails_naming_key_and_choices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, trainer={"trainer_strategy": "megatron"})
    line = str(err.value)
    assert "\n" not in line
    assert "trainer.trainer_strategy" in line and "megatron" in line and "fsdp2" in line


def test_taskset_queue_keys_are_reported_as_without_effect(tmp_path: Path) -> None:
    buffer = {
        "explorer_input": {
            "taskset": {"name": "tasks", "path": "/d", "use_priority_queue": True},
        }
    }
    found = dict(set_without_effect(_config(tmp_path, buffer=buffer)))
    assert "priority is for queues" in found["buffer.explorer_input.taskset.use_priority_queue"]


def test_auxiliary_total_epochs_must_be_positive(tmp_path: Path) -> None:
    aux = {"sft": {"path": "/d", "total_epochs": 0}}
    with pytest.raises(ConfigError, match="auxiliary_buffers.sft.total_epochs"):
        _resolved(tmp_path, buffer={"trainer_input": {"auxiliary_buffers": aux}})


def test_async_workflow_names_are_the_sync_workflows() -> None:
    for name in ("math_boxed_workflow", "math_rm_workflow", "math_ruler_workflow"):
        assert WORKFLOWS.get(f"async_{name}") is WORKFLOWS.get(name)


# max_repeat_times_per_runner


def test_split_repeats_cuts_repeat_times_into_parts() -> None:
    task = Task(raw={}, workflow="w", reward_fn=None, repeat_times=8)
    parts = split_repeats([task], 3)
    # 8 runs, at most 3 per part: 3 + 3 + 2, numbered from 0, 3 and 6
    assert [(p.repeat_times, offset) for p, offset in parts] == [(3, 0), (3, 3), (2, 6)]
    assert split_repeats([task], None) == [(task, 0)]


THREADS: set[str] = set()


class RepeatCountingWorkflow(Workflow):
    """One experience per run; records which runner thread ran it."""

    async def run_async(self) -> list[Experience]:
        THREADS.add(threading.current_thread().name)
        return [
            Experience(tokens=torch.tensor([1, 2]), prompt_length=1, eid=EID(run=r))
            for r in range(self.task.repeat_times)
        ]


@pytest.fixture
def counting_workflow():
    """Registered for one test only, so the registry holds the built-in names after it."""
    WORKFLOWS.register("repeat_counting_test_workflow")(RepeatCountingWorkflow)
    yield
    WORKFLOWS._items.pop("repeat_counting_test_workflow", None)


@pytest.mark.usefixtures("counting_workflow")
def test_runner_pool_runs_the_parts_on_several_runners_as_one_group() -> None:
    THREADS.clear()
    pool = RunnerPool(
        [ModelWrapper(object(), name="m")],
        num_runners=3,
        max_timeout=30,
        max_retry_times=0,
        max_repeat_times_per_runner=2,
    )
    task = Task(raw={}, workflow="repeat_counting_test_workflow", reward_fn=None, repeat_times=5)
    task.index = 4
    try:
        result = pool.run_tasks([task], batch_id=1)
    finally:
        pool.close()
    assert [e.eid.run for e in result.experiences] == [0, 1, 2, 3, 4]
    assert {e.eid.group for e in result.experiences} == {"1/4"}
    assert len(THREADS) == 3  # parts of 2, 2 and 1 runs, each on its own runner


# data_processor.experience_pipeline.save_input


def test_experience_pipeline_saves_its_input_before_the_operators(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    ops = [{"name": "invalid_reward_filter", "args": {}}]
    pipeline = ExperiencePipeline(ops, save_path=path)
    exps = [
        Experience(tokens=torch.tensor([1, 2]), prompt_length=1, reward=1.0),
        Experience(tokens=torch.tensor([1, 3]), prompt_length=1, reward=float("nan")),
    ]
    kept, _ = pipeline.process(exps)
    pipeline.close()
    lines = path.read_text().splitlines()
    assert len(kept) == 1 and len(lines) == 2  # the dropped one is in the file too
