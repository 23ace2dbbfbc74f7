"""End to end: asynchronous synchronisation through ``trinity run``.

* mode both with ``sync_offset: 1, sync_interval: 2``: the explorer runs ahead and each
  step's policy version and staleness follow the schedule; the trainer actor computes its
  advantages with a ``--plugin-dir`` advantage function;
* a split run: ``mode: train`` and ``mode: explore`` as two ``trinity run`` processes on
  one job directory, weights passing through checkpoint files and experiences through a
  shared SQLite buffer;
* ``sync_style: fully_async``: two batches in flight, no wait for weights, and the
  staleness of every step within ``staleness_control``'s bound.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_testing import DEMO, REPO, run_demo, write_plugin

from trinity.sync.weights import TRAINER_STATUS, required_version
from trinity.trainer.train_loop import staleness

STEPS = 4
QUICK = [
    "explorer.eval_on_startup=false",
    "buffer.explorer_input.eval_tasksets=[]",
    "explorer.runner_per_model=8",
    "model.max_response_tokens=8",
    "continue_from_checkpoint=true",
]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_schedule_of_offset_and_interval() -> None:
    # sync_interval 2, sync_offset 1: steps 1-3 explore with the initial weights, step 4
    # waits for version 2; staleness 0, 1, 2, 1
    assert [required_version(s, 2, 1) for s in range(1, 7)] == [0, 0, 0, 2, 2, 4]
    assert [staleness(s, required_version(s, 2, 1)) for s in range(1, 7)] == [0, 1, 2, 1, 2, 1]
    # the synchronous schedule: every step uses the previous step's weights
    assert [staleness(s, required_version(s, 1, 0)) for s in range(1, 5)] == [0, 0, 0, 0]


@pytest.mark.slow
def test_async_run_reports_the_staleness_of_its_schedule(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    plugins = write_plugin(tmp_path / "plugins", "run")
    result = run_demo(
        tiny_model_dir,
        tmp_path,
        "algorithm.advantage_fn=constant_advantage_run",
        "algorithm.advantage_fn_args={value: 0.25}",
        "name=async",
        f"buffer.total_steps={STEPS}",
        "synchronizer.sync_method=memory",
        "synchronizer.sync_interval=2",
        "synchronizer.sync_offset=1",
        "trainer.save_interval=0",
        "buffer.trainer_input.experience_buffer.path=null",
        *QUICK,
        plugin_dir=plugins,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    job = tmp_path / "trinity-demo" / "async"
    explorer = [
        r
        for r in _rows(job / "monitor" / "async_explorer_metrics.jsonl")
        if "rollout/staleness" in r
    ]
    trainer = _rows(job / "monitor" / "async_trainer_metrics.jsonl")
    expected_versions = [required_version(s, 2, 1) for s in range(1, STEPS + 1)]
    expected_staleness = [
        float(staleness(s, v)) for s, v in zip(range(1, STEPS + 1), expected_versions, strict=True)
    ]
    assert [r["step"] for r in explorer] == list(range(1, STEPS + 1))
    assert [r["rollout/model_version"] for r in explorer] == expected_versions
    assert [r["rollout/staleness"] for r in explorer] == expected_staleness == [0, 1, 2, 1]
    assert [r["step"] for r in trainer] == list(range(1, STEPS + 1))
    assert [r["trainer/staleness/mean"] for r in trainer] == expected_staleness
    # the plugin's advantage function ran in the trainer actor: GRPO would give 0 here (the
    # tiny model earns no reward), the plugin gives every token 0.25
    for row in trainer:
        assert row["critic/advantages/mean"] == pytest.approx(0.25)
        assert row["critic/advantages/max"] == pytest.approx(0.25)
    assert "published policy version 2" in (job / "log" / "trainer.log").read_text()
    assert "synchronized to policy version 2" in (job / "log" / "explorer.log").read_text()


@pytest.mark.slow
def test_split_explore_and_train_processes(tiny_model_dir: Path, tmp_path: Path) -> None:
    steps = 3
    common = [
        "run",
        "--config",
        str(DEMO),
        f"model.model_path={tiny_model_dir}",
        f"checkpoint_root_dir={tmp_path}",
        "name=split",
        f"buffer.total_steps={steps}",
        "synchronizer.sync_method=checkpoint",
        "synchronizer.sync_interval=1",
        "trainer.save_interval=0",
        "buffer.trainer_input.experience_buffer.storage_type=sql",
        f"buffer.trainer_input.experience_buffer.path=sqlite:///{tmp_path}/shared.db",
        *QUICK,
    ]
    job = tmp_path / "trinity-demo" / "split"

    def start(mode: str) -> subprocess.Popen:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trinity",
                *common,
                f"mode={mode}",
                f"ray_namespace=split-{mode}",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    # the trainer starts first (a local Ray instance unless one runs); the explorer joins
    # the same instance and finishes first, since the trainer trains on its last batch
    trainer = start("train")
    explorer = None
    try:
        # the explorer waits for scheduled weights only while a trainer runs on the job dir
        deadline = time.monotonic() + 300
        while not (job / TRAINER_STATUS).exists():
            assert trainer.poll() is None, trainer.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the trainer did not start in 300 s"
            time.sleep(0.5)
        explorer = start("explore")
        _, explorer_err = explorer.communicate(timeout=600)
        assert explorer.returncode == 0, explorer_err[-4000:]
        _, trainer_err = trainer.communicate(timeout=600)
        assert trainer.returncode == 0, trainer_err[-4000:]
    finally:
        for proc in (trainer, explorer):
            if proc is not None and proc.poll() is None:
                proc.kill()

    # the explorer took every new policy from disk: step s explored with version s - 1
    rows = [
        r
        for r in _rows(job / "monitor" / "split_explorer_metrics.jsonl")
        if "rollout/staleness" in r
    ]
    assert [r["rollout/model_version"] for r in rows] == [0, 1, 2]
    assert [r["rollout/staleness"] for r in rows] == [0, 0, 0]
    # the trainer read the explorer's experiences from the shared buffer
    trained = _rows(job / "monitor" / "split_trainer_metrics.jsonl")
    assert [r["step"] for r in trained] == [1, 2, 3]
    assert all(r["batch/size"] == 16 for r in trained)
    assert [r["trainer/staleness/mean"] for r in trained] == [0, 0, 0]
    assert (job / "latest_state_dict_iteration.txt").read_text().strip() == "3"
    assert json.loads((job / TRAINER_STATUS).read_text())["state"] == "finished"


@pytest.mark.slow
def test_explorer_driven_run_takes_weights_at_its_sync_points(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    # sync_interval 2: steps 1-2 explore with the initial weights; before step 3 the
    # explorer asks and gets whatever the trainer has reached then (version 1 or 2, as
    # fast as each side runs); step 4 is no sync point; the final step is always published
    result = run_demo(
        tiny_model_dir,
        tmp_path,
        "name=driven",
        f"buffer.total_steps={STEPS}",
        "synchronizer.sync_method=memory",
        "synchronizer.sync_style=explorer_driven",
        "synchronizer.sync_interval=2",
        "trainer.save_interval=0",
        "buffer.trainer_input.experience_buffer.path=null",
        *QUICK,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    job = tmp_path / "trinity-demo" / "driven"
    versions = [
        r["rollout/model_version"]
        for r in _rows(job / "monitor" / "driven_explorer_metrics.jsonl")
        if "rollout/staleness" in r
    ]
    assert len(versions) == STEPS
    assert versions[:2] == [0, 0]
    assert versions[2] in (1, 2)
    assert versions[3] == versions[2]
    log = (job / "log" / "trainer.log").read_text()
    published = sorted({int(m) for m in re.findall(r"published policy version (\d+)", log)})
    # only the answer to the explorer's request and the last step, not every 2 steps
    assert published == [versions[2], STEPS]


# an advantage function that takes SLOW_TRAIN_S per call: a trainer slower than the explorer
SLOW_ADVANTAGE = """
import time
from trinity.algorithm.advantage.base import AdvantageFn
from trinity.algorithm.registries import ADVANTAGE_FN


@ADVANTAGE_FN.register("slow_constant_advantage")
class SlowConstantAdvantage(AdvantageFn):
    def compute(self, inputs):
        time.sleep({seconds})
        advantages = 0.25 * inputs.mask
        return advantages, advantages.clone()
"""
SLOW_TRAIN_S = 1.5


@pytest.mark.slow
def test_fully_async_run_never_waits_for_the_trainer(tiny_model_dir: Path, tmp_path: Path) -> None:
    # two batches in flight: step 2 begins before step 1 is handed on; weights are taken
    # by a background thread as they are published, so no step waits for them, though
    # each train step takes over SLOW_TRAIN_S; the trainer drops experiences more than 2
    # policy versions old (staleness_control). With a 1.0 s train step, the same run with
    # sync_style fixed (each step waits for the previous step's weights) measured 1.1-1.2 s
    # of explorer idle time before steps 2 and 3, this one at most 0.06 s on an idle
    # machine. The bound leaves room for a loaded one: the idle time before step 3 is
    # step 1's hand-on (pipeline, buffer, monitors) when step 2 finished before it.
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "slow_advantage.py").write_text(SLOW_ADVANTAGE.format(seconds=SLOW_TRAIN_S))
    steps = 3
    result = run_demo(
        tiny_model_dir,
        tmp_path,
        "name=fully",
        f"buffer.total_steps={steps}",
        "synchronizer.sync_style=fully_async",
        "explorer.max_inflight_batches=2",
        "algorithm.advantage_fn=slow_constant_advantage",
        "algorithm.sample_strategy=staleness_control",
        "algorithm.sample_strategy_args={max_staleness: 2}",
        "trainer.save_interval=0",
        "buffer.trainer_input.experience_buffer.path=null",
        *QUICK,
        plugin_dir=plugins,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    job = tmp_path / "trinity-demo" / "fully"
    explored = [
        r
        for r in _rows(job / "monitor" / "fully_explorer_metrics.jsonl")
        if "rollout/staleness" in r
    ]
    assert [r["step"] for r in explored] == [1, 2, 3]
    print("explorer wait for weights per step:", [r["time/wait_weights"] for r in explored])
    print("explorer idle before each step:", [r["time/explorer_idle"] for r in explored])
    print("rollout staleness per step:", [r["rollout/staleness"] for r in explored])
    # measured: installs of new weights during a rollout, and the gap before each step
    # with nothing rolling out; a step that waited for the trainer would show its time
    assert all(r["time/wait_weights"] < SLOW_TRAIN_S / 2 for r in explored)
    assert all(r["time/explorer_idle"] < SLOW_TRAIN_S / 2 for r in explored)
    assert all(0 <= r["rollout/staleness"] <= r["step"] - 1 for r in explored)
    trained = [
        r
        for r in _rows(job / "monitor" / "fully_trainer_metrics.jsonl")
        if "trainer/staleness/max" in r
    ]
    print(
        "trainer staleness (mean, max) per step:",
        [(r["trainer/staleness/mean"], r["trainer/staleness/max"]) for r in trained],
    )
    assert [r["step"] for r in trained] == [1, 2, 3]
    assert all(0 <= r["trainer/staleness/mean"] <= r["trainer/staleness/max"] <= 2 for r in trained)
    print("trainer step times:", [r["time/train_step"] for r in trained])
    assert all(r["time/train_step"] >= SLOW_TRAIN_S for r in trained)
    log = (job / "log" / "explorer.log").read_text()
    assert log.index("explore step 2 begins") < log.index("explore step 1 ends")
