"""The swanlab monitor in SwanLab's offline mode: the run files it writes under
``<job_dir>/monitor/swanlab`` hold every logged metric at its step (no network)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from trinity.monitor import make_monitor

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("swanlab") is None,
    reason="swanlab is not installed (pip install swanlab)",
)

LOGGED = {
    "explorer": {1: {"rollout/reward/mean": 0.5, "eval/tasks/accuracy/mean@4": 0.25}, 2: {"rollout/reward/mean": 0.75}},
    "trainer": {1: {"actor/pg_loss": -0.125}, 2: {"actor/pg_loss": 0.0625}},
}  # fmt: skip


def read_run(run_dir: Path) -> tuple[str, dict[str, dict[int, float]], bool]:
    """The run's name, its scalars ``{key: {step: value}}``, and whether it finished."""
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    (log_file,) = run_dir.glob("run-*.swanlab")
    reader = DataStoreReader()
    reader.open(log_file)
    name, scalars, finished = "", {}, False
    try:
        for data in reader:
            record = Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "start":
                name = record.start.name
            elif kind == "scalar":
                scalars.setdefault(record.scalar.key, {})[record.scalar.step] = (
                    record.scalar.value.number
                )
            elif kind == "finish":
                finished = True
    finally:
        reader.close()
    return name, scalars, finished


def test_offline_runs_hold_every_metric_at_its_step(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # nothing read from or left in ~
    monkeypatch.chdir(tmp_path)
    for probe in ("HARDWARE", "MONITOR", "REQUIREMENTS", "GIT", "RUNTIME"):
        monkeypatch.setenv(f"SWANLAB_PROBE_{probe}", "false")  # 2 s a run, and not under test
    job_dir = tmp_path / "proj" / "exp"
    streams = (sys.stdout, sys.stderr)
    for role, steps in LOGGED.items():
        monitor = make_monitor(
            "swanlab",
            project="proj",
            name="exp",
            role=role,
            job_dir=job_dir,
            monitor_args={"mode": "offline"},
            config_dict={"algorithm": {"algorithm_type": "grpo"}},
        )
        for step, metrics in steps.items():
            monitor.log(metrics, step)
        monitor.close()  # finishes the run: the next role's run can start in this process
        assert (sys.stdout, sys.stderr) == streams  # SwanLab's copy of the output ends

    runs = {}
    for run_dir in (job_dir / "monitor" / "swanlab").glob("run-*"):
        name, scalars, finished = read_run(run_dir)
        assert finished, run_dir
        runs[name] = scalars
    assert sorted(runs) == ["exp_explorer", "exp_trainer"]
    for role, steps in LOGGED.items():
        expected: dict[str, dict[int, float]] = {}
        for step, metrics in steps.items():
            for key, value in metrics.items():
                expected.setdefault(key, {})[step] = value
        assert runs[f"exp_{role}"] == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]  # no ./swanlog, no ~
