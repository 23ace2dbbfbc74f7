"""Several training tasksets as one stream: proportional batches, step counting, resume."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path

import pytest
import torch

from trinity.buffer.task_reader import TasksetExhausted, TasksetMix, TasksetReader
from trinity.config import config_from_dict, dry_run_report, resolve, validate
from trinity.explorer.explorer import make_taskset_mix, rollout_seed, taskset_metrics
from trinity.launch.run import count_steps
from trinity.types import Experience


def write_taskset(directory: Path, prefix: str, n: int) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": f"{prefix}{i}", "response": str(i)} for i in range(n)]
    (directory / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(directory)


def storage(name: str, path: str, selector: str = "sequential") -> dict:
    return {"name": name, "storage_type": "file", "path": path, "task_selector": selector}


def config(tmp_path: Path, tasksets: list[dict], **buffer) -> object:
    data = {
        "mode": "both",
        "seed": 5,
        "model": {"model_path": "unused", "max_model_len": 64},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "buffer": {
            "batch_size": 3,
            **buffer,
            "explorer_input": {"tasksets": tasksets, "default_workflow_type": "math_workflow"},
        },
    }
    cfg = resolve(config_from_dict(data), now=datetime(2025, 1, 1))
    validate(cfg)
    return cfg


def two_tasksets(tmp_path: Path, sizes: tuple[int, int], selectors=("sequential",) * 2) -> list:
    """Tasksets a (prompts a0, a1, ...) and b (b0, b1, ...) of the given sizes."""
    return [
        storage(name, write_taskset(tmp_path / name, name, n), selector)
        for name, n, selector in zip("ab", sizes, selectors, strict=True)
    ]


def prompts(batches) -> list[list[str]]:
    return [[t.raw["prompt"] for t in batch] for batch in batches]


def read_all(mix: TasksetMix) -> list[list[str]]:
    out = []
    while True:
        try:
            out.append(mix.read_batch())
        except TasksetExhausted:
            return prompts(out)


def test_batches_draw_in_proportion_to_taskset_sizes(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        two_tasksets(tmp_path, (6, 3)),
        total_epochs=2,
    )
    mix = make_taskset_mix(cfg)
    assert mix.names == ["a", "b"]
    # 2 epochs x (6 + 3) tasks in batches of 3
    assert len(mix) == count_steps(cfg) == 6
    # slots sorted by (k + 0.5) / n: a at 1/12, 3/12, 5/12, ...; b at 2/12, 6/12, 10/12
    epoch = [["a0", "b0", "a1"], ["a2", "b1", "a3"], ["a4", "b2", "a5"]]
    assert read_all(mix) == epoch + epoch
    with pytest.raises(TasksetExhausted, match=r"tasksets \['a', 'b'\] are exhausted after 6"):
        mix.read_batch()
    assert "training tasksets: a, b (batches draw in proportion to their sizes)" in (
        dry_run_report(cfg, gpus_available=0, cpus=2)
    )


def test_each_taskset_keeps_its_selector_and_every_task_comes_once_an_epoch(
    tmp_path: Path,
) -> None:
    cfg = config(
        tmp_path,
        two_tasksets(tmp_path, (5, 4), ("shuffle", "sequential")),
        total_epochs=3,
    )
    flat = [p for batch in read_all(make_taskset_mix(cfg)) for p in batch]
    epochs = [flat[i : i + 9] for i in range(0, 27, 9)]
    for epoch in epochs:
        assert sorted(epoch) == sorted([f"a{i}" for i in range(5)] + [f"b{i}" for i in range(4)])
        assert [p for p in epoch if p.startswith("b")] == ["b0", "b1", "b2", "b3"]
    shuffled = [[p for p in epoch if p.startswith("a")] for epoch in epochs]
    assert shuffled[0] != shuffled[1] or shuffled[1] != shuffled[2]  # reshuffled per epoch


def test_total_steps_cuts_the_mixed_stream(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        two_tasksets(tmp_path, (2, 2)),
        total_epochs=1,
        total_steps=3,
    )
    mix = make_taskset_mix(cfg)
    assert len(mix) == count_steps(cfg) == 3
    assert read_all(mix) == [["a0", "b0", "a1"], ["b1", "a0", "b0"], ["a1", "b1", "a0"]]


@pytest.mark.parametrize("selector", ["sequential", "shuffle", "random"])
def test_a_mix_of_one_reads_what_its_reader_reads(tmp_path: Path, selector: str) -> None:
    cfg = config(
        tmp_path,
        [storage("a", write_taskset(tmp_path / "a", "a", 7), selector)],
        total_epochs=3,
    )
    reader = TasksetReader(
        cfg.buffer.explorer_input.taskset,
        batch_size=3,
        total_epochs=3,
        seed=cfg.seed,
        selector=selector,
        default_workflow="math_workflow",
    )
    assert read_all(make_taskset_mix(cfg)) == prompts(reader)


@pytest.mark.parametrize("selector", ["sequential", "shuffle", "random"])
def test_state_dict_resumes_the_mix_at_the_next_batch(tmp_path: Path, selector: str) -> None:
    cfg = config(
        tmp_path,
        two_tasksets(tmp_path, (5, 3), (selector, selector)),
        total_epochs=3,
    )
    first = make_taskset_mix(cfg)
    for _ in range(4):  # 12 positions: past the first epoch boundary (8 tasks)
        first.read_batch()
    state = json.loads(json.dumps(first.state_dict()))  # survives being written to disk
    rest = read_all(first)

    resumed = make_taskset_mix(config(tmp_path, cfg_tasksets(cfg), total_epochs=3))
    resumed.load_state_dict(state)
    assert resumed.epoch == 1
    assert read_all(resumed) == rest
    assert len(rest) == len(first) - 4


def cfg_tasksets(cfg) -> list[dict]:
    return [storage(t.name, t.path, t.task_selector) for t in cfg.buffer.explorer_input.tasksets]


def test_resuming_a_different_mix_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a = storage("a", write_taskset(tmp_path / "a", "a", 4))
    b = storage("b", write_taskset(tmp_path / "b", "b", 2))
    saved = make_taskset_mix(config(tmp_path, [a, b]))
    saved.read_batch()
    mix = make_taskset_mix(config(tmp_path, [a]))
    with caplog.at_level(logging.WARNING):
        mix.load_state_dict(saved.state_dict())
    assert "resuming at position 3 of a different task order" in caplog.text
    assert mix.position == 3
    # a state written before several tasksets were read (position only) loads silently
    caplog.clear()
    mix.load_state_dict({"position": 1, "num_tasks": 4, "seed": 5, "selector": "sequential"})
    assert mix.position == 1 and not caplog.text


def test_mix_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one taskset"):
        TasksetMix([], batch_size=1)
    cfg = config(tmp_path, [storage("a", write_taskset(tmp_path / "a", "a", 2))])
    reader = make_taskset_mix(cfg).readers[0]
    with pytest.raises(ValueError, match=r"names must be unique, got \['a', 'a'\]"):
        TasksetMix([reader, reader], batch_size=1)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        TasksetMix([reader], batch_size=0)


def test_rollout_seeds_are_a_function_of_seed_step_and_slot() -> None:
    seeds = {rollout_seed(42, step, slot) for step in range(1, 5) for slot in range(8)}
    assert len(seeds) == 32
    assert rollout_seed(42, 3, 1) == rollout_seed(42, 3, 1)
    assert rollout_seed(42, 3, 1) != rollout_seed(43, 3, 1)
    assert all(0 <= s < 2**32 for s in seeds)


def test_taskset_metrics_split_a_step_by_taskset() -> None:
    def exp(taskset: str, reward: float, accuracy: float | None = None) -> Experience:
        metrics = {} if accuracy is None else {"reward/accuracy": accuracy}
        return Experience(
            tokens=torch.tensor([1, 2, 3]),
            prompt_length=2,
            reward=reward,
            info={"taskset": taskset},
            metrics=metrics,
        )

    metrics = taskset_metrics([exp("a", 1.0, 1.0), exp("a", 0.5, 0.0), exp("b", 0.25)])
    assert metrics == {
        "rollout/taskset/a/reward/mean": 0.75,  # (1 + 0.5) / 2
        "rollout/taskset/a/accuracy/mean": 0.5,  # (1 + 0) / 2
        "rollout/taskset/a/num_experiences": 2.0,
        "rollout/taskset/b/reward/mean": 0.25,
        "rollout/taskset/b/accuracy/mean": 0.25,  # no accuracy component: the reward
        "rollout/taskset/b/num_experiences": 1.0,
    }
