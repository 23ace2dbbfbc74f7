"""The metrics of real explore, eval and train steps land in every monitor, as documented.

Two steps run in-process with the tiny model: evaluation, explore step, experience
pipeline and train step, as the explorer and trainer actors call them. Their metric
dicts go through the monitors the way the actors send them, and the files each
backend wrote are read back: TensorBoard event files, a W&B offline run
(``WANDB_MODE=offline``) and an MLflow run in a local SQLite store. Every key must be
documented in ``docs/metrics.md``; every value read back must be finite.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import struct
import time
from pathlib import Path

import pytest

from trinity.monitor import make_monitor

pytestmark = pytest.mark.slow  # real explore and train steps, and three tracking libraries

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "examples" / "arithmetic" / "grpo.yaml"
METRICS_DOC = REPO / "docs" / "metrics.md"
STEPS = 2


def documented_patterns() -> list[re.Pattern[str]]:
    """Metric names in the tables of docs/metrics.md; ``<taskset>``-style parts match one path part."""
    names = re.findall(r"^\| `([^`]+)`", METRICS_DOC.read_text(), flags=re.MULTILINE)
    assert len(names) > 30, "docs/metrics.md lists the metric names in tables"
    return [
        re.compile(
            "".join(
                "[^/]+" if part.startswith("<") else re.escape(part)
                for part in re.split(r"(<[^>]+>)", name)
            )
        )
        for name in names
    ]


def _write_tasks(path: Path, offset: int, n: int) -> None:
    rows = [{"question": f"What is {i} + {offset}?", "answer": str(i + offset)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def step_metrics(tiny_model_dir: Path, tmp_path_factory) -> dict[str, list[dict[str, float]]]:
    """``{"explorer": [eval@0, step 1, step 2, eval@2], "trainer": [step 1, step 2]}``."""
    from trinity import loop
    from trinity.config import load_config

    tmp = tmp_path_factory.mktemp("steps")
    data = tmp / "data"
    data.mkdir()
    _write_tasks(data / "train.jsonl", 1, 4)
    _write_tasks(data / "test.jsonl", 2, 2)
    config = load_config(
        DEMO,
        [
            f"model.model_path={tiny_model_dir}",
            f"checkpoint_root_dir={tmp}",
            f"buffer.total_steps={STEPS}",
            "algorithm.repeat_times=2",
            "model.max_response_tokens=4",
            "explorer.runner_per_model=2",
            f"buffer.explorer_input.taskset.path={data}",
            f"buffer.explorer_input.eval_tasksets[0].path={data}",
            "algorithm.kl_loss_fn=k2",  # the KL loss metrics too
            "data_processor.experience_pipeline.operators=[{name: pass_rate_stats}]",
        ],
    )
    run = loop.build(config, total_steps=STEPS, model_dir=tiny_model_dir, job_dir=tmp)
    logged: dict[str, list[dict[str, float]]] = {
        "explorer": [run.explorer.evaluate(0)],
        "trainer": [],
    }
    try:
        # the step bodies the run's loops use (trinity.loop), with the metrics they add
        for result in loop.run_steps(run, STEPS):
            assert result.train is not None
            logged["explorer"].append(result.explore)
            logged["trainer"].append(result.train)
        assert len(logged["trainer"]) == STEPS
        logged["explorer"].append(run.explorer.evaluate(STEPS))
    finally:
        loop.close(run)
    return logged


def _steps(role: str) -> list[int]:
    """The steps the actors log at: the final evaluation shares the last explore step."""
    return [0, 1, 2, 2] if role == "explorer" else [1, 2]


def _log_all(job_dir: Path, monitor_type: str, step_metrics, monitor_args=None) -> None:
    for role, records in step_metrics.items():
        monitor = make_monitor(
            monitor_type,
            project="proj",
            name="exp",
            role=role,
            job_dir=job_dir,
            monitor_args=monitor_args or {},
            config_dict={"algorithm": {"algorithm_type": "grpo"}},
        )
        for step, metrics in zip(_steps(role), records, strict=True):
            monitor.log(metrics, step)
        monitor.close()


def _expected(step_metrics, role: str) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for step, metrics in zip(_steps(role), step_metrics[role], strict=True):
        for key, value in metrics.items():
            out.setdefault(key, {})[step] = value
    return out


def test_every_emitted_metric_is_documented(step_metrics):
    patterns = documented_patterns()
    keys = {k for records in step_metrics.values() for m in records for k in m}
    undocumented = sorted(k for k in keys if not any(p.fullmatch(k) for p in patterns))
    assert undocumented == []
    for key in (
        "rollout/reward/mean",
        "rollout/accuracy/mean",
        "eval/arithmetic_eval/accuracy/mean@1",
        "pass_rate/mean",
        "actor/pg_loss",
        "actor/kl_loss",
        "actor/entropy",
        "actor/grad_norm",
        "time/train_step",
    ):
        assert key in keys
    assert all(
        math.isfinite(v) for records in step_metrics.values() for m in records for v in m.values()
    )


def test_tensorboard_event_files_hold_every_metric(step_metrics, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _log_all(tmp_path, "tensorboard", step_metrics)
    for role in ("explorer", "trainer"):
        acc = EventAccumulator(str(tmp_path / "monitor" / "tensorboard" / f"exp_{role}"))
        acc.Reload()
        expected = _expected(step_metrics, role)
        assert set(acc.Tags()["scalars"]) == set(expected)
        for key, by_step in expected.items():
            found = {e.step: e.value for e in acc.Scalars(key)}
            assert found == pytest.approx(by_step, rel=1e-6), key  # stored as float32
            assert all(math.isfinite(v) for v in found.values())


def _wandb_records(log_file: Path) -> list[bytes]:
    """The records of a ``run-*.wandb`` transaction log.

    The file is a LevelDB-style log: a 7-byte file header (``:W&B``, magic, version),
    then 32 KiB blocks of records, each with a 7-byte header (crc32, length, type);
    a record too long for its block is split into FIRST, MIDDLE... and LAST pieces.
    """
    block, header = 32768, 7
    raw = log_file.read_bytes()
    assert raw[:4] == b":W&B"
    records: list[bytes] = []
    pending = b""
    pos = header
    while pos + header <= len(raw):
        if block - pos % block < header:  # the rest of a block too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos : pos + header])
        if pos + header + length > len(raw):
            break  # a record still being written
        data = raw[pos + header : pos + header + length]
        pos += header + length
        if kind == 1:  # FULL
            records.append(data)
        elif kind == 2:  # FIRST
            pending = data
        elif kind == 3:  # MIDDLE
            pending += data
        elif kind == 4:  # LAST
            records.append(pending + data)
    return records


def _wandb_run(run_dir: Path, timeout: float = 60) -> tuple[str, list[dict]]:
    """The run name and the history rows (one per logged step) of an offline run.

    W&B's service process writes the log; the monitor's ``close`` waits for it, and
    this checks the log is complete by its final ``exit`` record.
    """
    from wandb.proto import wandb_internal_pb2

    (log_file,) = run_dir.glob("run-*.wandb")
    deadline = time.monotonic() + timeout
    while True:
        records = []
        for data in _wandb_records(log_file):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            records.append(record)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            break
        assert time.monotonic() < deadline, f"{log_file} has no exit record after {timeout}s"
        time.sleep(0.2)
    name, rows = "", []
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            name = record.run.display_name
        elif kind == "history":
            rows.append(
                {
                    item.key or ".".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return name, rows


@pytest.mark.skipif(
    importlib.util.find_spec("wandb") is None, reason="wandb is not installed (pip install wandb)"
)
def test_wandb_offline_run_holds_every_metric(step_metrics, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    _log_all(tmp_path, "wandb", step_metrics)

    runs = dict(_wandb_run(d) for d in (tmp_path / "monitor" / "wandb").glob("offline-run-*"))
    assert sorted(runs) == ["exp_explorer", "exp_trainer"]
    for role in ("explorer", "trainer"):
        expected = _expected(step_metrics, role)
        found: dict[str, dict[int, float]] = {}
        for row in runs[f"exp_{role}"]:
            for key, value in row.items():
                if not key.startswith("_"):
                    found.setdefault(key, {})[row["_step"]] = value
        assert set(found) == set(expected)
        for key, by_step in expected.items():
            assert found[key] == pytest.approx(by_step, rel=1e-9), key
            assert all(math.isfinite(v) for v in found[key].values())


@pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None,
    reason="mlflow is not installed (pip install mlflow)",
)
def test_mlflow_runs_hold_every_metric(step_metrics, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from trinity.monitor.mlflow import mlflow_key

    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _log_all(tmp_path / "proj" / "exp", "mlflow", step_metrics, {"uri": uri})

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("proj")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["exp_explorer", "exp_trainer"]
    for role in ("explorer", "trainer"):
        run = runs[f"exp_{role}"]
        assert run.info.status == "FINISHED"
        expected = _expected(step_metrics, role)
        assert set(run.data.metrics) == {mlflow_key(k) for k in expected}
        for key, by_step in expected.items():
            history = client.get_metric_history(run.info.run_id, mlflow_key(key))
            found = {m.step: m.value for m in history}
            assert found == pytest.approx(by_step, rel=1e-9), key
            assert all(math.isfinite(v) for v in found.values())
        # the config artifact sits in the project directory, not in ./mlruns
        assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["config.json"]
    assert list((tmp_path / "proj" / "mlflow_artifacts").rglob("config.json"))
    assert not (tmp_path / "mlruns").exists()
