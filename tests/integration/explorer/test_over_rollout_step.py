"""explorer.over_rollout through the real explorer, in-process with the tiny model.

Each step reads four tasks, the last of which hangs until the test releases it. With
ratio 0.25 the step waits for three, then wait_after_min (0.5 s) for the fourth, and
goes on without it: the cut is counted, nothing times out (max_timeout is 60 s). With
ratio 0 the step waits for every task, here until the hung one is released (1 s).
"""

from __future__ import annotations

import threading
from pathlib import Path

from behaviour_workflow import RELEASE, behaviour_config, write_tasks

from trinity.explorer.explorer import Explorer


def test_a_step_goes_on_without_its_slowest_task(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_tasks(data, "train", ["ok", "ok", "ok", "hang"] * 2)
    write_tasks(data, "test", ["ok"])
    config = behaviour_config(
        tiny_model_dir,
        tmp_path,
        data,
        "buffer.batch_size=4",
        "explorer.runner_per_model=4",
        "explorer.max_timeout=60",
        "explorer.over_rollout.ratio=0.25",
        "explorer.over_rollout.wait_after_min=0.5",
    )
    explorer = Explorer(config, model_dir=tiny_model_dir, log_dir=tmp_path / "log")
    try:
        experiences, metrics = explorer.explore_step(1)
        assert metrics["rollout/over_rollout/cut_tasks"] == 1
        assert metrics["rollout/over_rollout/partial_tasks"] == 0
        assert metrics["rollout/timed_out_tasks"] == 0
        assert [e.eid.task for e in experiences] == [0, 0, 1, 1, 2, 2]

        # the same explorer with ratio 0: the step waits for the hung task's release
        explorer.config.explorer.over_rollout.ratio = 0.0
        threading.Timer(1.0, RELEASE.set).start()
        experiences, metrics = explorer.explore_step(2)
        # without a cut, a step ends when every task has: none failed, timed out or was
        # skipped, so task 7 ended, released (a released hang returns no experiences)
        assert "rollout/over_rollout/cut_tasks" not in metrics
        ended_otherwise = ("failed_tasks", "timed_out_tasks", "skipped_tasks")
        assert [metrics[f"rollout/{name}"] for name in ended_otherwise] == [0, 0, 0]
        assert [e.eid.task for e in experiences] == [4, 4, 5, 5, 6, 6]
    finally:
        explorer.close()
    logs = "".join(p.read_text() for p in sorted((tmp_path / "log").glob("explorer_runner_*.log")))
    assert "1 task(s) cut (first: task 3 of taskset 'arithmetic')" in logs
