import json
import logging
import math
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from trinity.monitor import MonitorGroup, RunInfo, make_monitor
from trinity.monitor.base import Monitor
from trinity.monitor.jsonl import JsonlMonitor, read_metrics
from trinity.utils.registry import UnknownNameError


def build(job_dir: Path, monitor_type="tensorboard", role="trainer", **kwargs):
    return make_monitor(
        monitor_type,
        project="proj",
        name="exp",
        role=role,
        job_dir=job_dir,
        monitor_args={},
        config_dict=kwargs.get("config_dict"),
    )


def scalars(event_dir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(event_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_event_files_hold_the_logged_scalars(tmp_path):
    monitor = build(tmp_path, config_dict={"algorithm": {"algorithm_type": "grpo"}})
    monitor.log({"actor/pg_loss": 0.5, "actor/entropy": 2.0}, step=1)
    monitor.log({"actor/pg_loss": 0.25, "actor/entropy": 1.5}, step=2)
    monitor.close()

    found = scalars(tmp_path / "monitor" / "tensorboard" / "exp_trainer")
    assert found["actor/pg_loss"] == [(1, 0.5), (2, 0.25)]
    assert found["actor/entropy"] == [(1, 2.0), (2, 1.5)]
    assert all(math.isfinite(v) for points in found.values() for _, v in points)


def test_explorer_and_trainer_are_two_runs_with_suffixes(tmp_path):
    for role in ("explorer", "trainer"):
        with build(tmp_path, role=role) as monitor:
            monitor.log({f"{role}/x": 1.0}, step=0)

    assert sorted(p.name for p in (tmp_path / "monitor" / "tensorboard").iterdir()) == [
        "exp_explorer",
        "exp_trainer",
    ]
    assert sorted(p.name for p in (tmp_path / "monitor").glob("*.jsonl")) == [
        "exp_explorer_metrics.jsonl",
        "exp_trainer_metrics.jsonl",
    ]


def test_jsonl_is_written_whatever_the_chosen_monitor(tmp_path):
    with build(tmp_path, monitor_type="console", role="explorer") as monitor:
        monitor.log({"rollout/reward/mean": 0.5, "rollout/accuracy/mean": 1}, step=3)
        monitor.log({"rollout/reward/mean": 0.75}, step=4)

    path = tmp_path / "monitor" / "exp_explorer_metrics.jsonl"
    assert read_metrics(path) == [
        {"step": 3, "rollout/reward/mean": 0.5, "rollout/accuracy/mean": 1.0},
        {"step": 4, "rollout/reward/mean": 0.75},
    ]
    assert not (tmp_path / "monitor" / "tensorboard").exists()


def test_non_finite_values_are_logged_without_crashing(tmp_path):
    with build(tmp_path) as monitor:
        monitor.log({"actor/pg_loss": math.nan, "actor/grad_norm": math.inf, "actor/lr": 1e-6}, 1)

    (record,) = read_metrics(tmp_path / "monitor" / "exp_trainer_metrics.jsonl")
    assert math.isnan(record["actor/pg_loss"])
    assert record["actor/grad_norm"] == math.inf
    found = scalars(tmp_path / "monitor" / "tensorboard" / "exp_trainer")
    assert found["actor/lr"] == [(1, pytest.approx(1e-6))]
    assert math.isnan(found["actor/pg_loss"][0][1])


def test_values_that_are_not_scalars_are_dropped(tmp_path):
    with build(tmp_path, monitor_type="jsonl") as monitor:
        monitor.log({"histogram": [1.0, 2.0], "actor/lr": 2}, step=5)

    lines = (tmp_path / "monitor" / "exp_trainer_metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"step": 5, "actor/lr": 2.0}]


def test_console_prints_one_compact_line_per_step(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="trinity.monitor.console"):
        with build(tmp_path, monitor_type="console") as monitor:
            monitor.log({"actor/pg_loss": 0.25, "actor/entropy": 2.345678}, step=7)

    lines = [r.getMessage() for r in caplog.records if r.name == "trinity.monitor.console"]
    assert lines == ["[trainer] step 7 | actor/entropy=2.346 actor/pg_loss=0.25"]


def test_several_types_comma_separated(tmp_path):
    monitor = build(tmp_path, monitor_type="tensorboard, console")
    assert [type(m).__name__ for m in monitor.monitors] == [
        "TensorBoardMonitor",
        "ConsoleMonitor",
        "JsonlMonitor",
    ]
    monitor.close()


def test_unknown_type_and_role_fail_with_the_valid_choices(tmp_path):
    with pytest.raises(UnknownNameError, match="tensorboard"):
        build(tmp_path, monitor_type="tensorbord")
    with pytest.raises(ValueError, match="explorer"):
        build(tmp_path, role="critic")


@pytest.mark.parametrize("library", ["wandb", "mlflow", "swanlab"])
def test_missing_optional_library_names_the_install_command(tmp_path, monkeypatch, library):
    # the test extra installs them: make their imports fail as if they were not installed
    # (a None entry in sys.modules, for the package and any submodule imported already)
    for name in [n for n in sys.modules if n.startswith(library + ".")] + [library]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=f"pip install {library}"):
        build(tmp_path, monitor_type=library)


class BrokenBackend(Monitor):
    def log(self, metrics, step):
        raise ConnectionError("tracking server unreachable")

    def close(self):
        pass


def test_a_failing_backend_does_not_stop_the_others(tmp_path):
    run = RunInfo(project="proj", name="exp", role="trainer", job_dir=tmp_path)
    jsonl = JsonlMonitor(run, {})
    group = MonitorGroup([BrokenBackend(), jsonl])
    group.log({"actor/pg_loss": 1.0}, step=1)
    group.log({"actor/pg_loss": 2.0}, step=2)
    group.close()

    assert group.failures == {"BrokenBackend": 2}
    assert [r["actor/pg_loss"] for r in read_metrics(jsonl.path)] == [1.0, 2.0]
