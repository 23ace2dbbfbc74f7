"""The MLflow monitor's ``username`` and ``password`` reach the tracking server with every
request and are not left in the process's environment (MLflow's client reads them from
MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD only).

The server is a small HTTP server that answers the REST calls the monitor makes and
records each request's Authorization header.
"""

from __future__ import annotations

import base64
import importlib.util
import os
from pathlib import Path

import pytest
from http_testing import json_server

from trinity.monitor import RunInfo

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None, reason="mlflow is not installed"
)


def _run_info(artifacts: Path) -> dict:
    return {
        "run_id": "r1",
        "run_uuid": "r1",
        "experiment_id": "1",
        "status": "RUNNING",
        "start_time": 0,
        "artifact_uri": artifacts.as_uri(),
        "lifecycle_stage": "active",
    }


@pytest.fixture
def tracking_server(tmp_path: Path):
    seen: list[tuple[str, str | None]] = []
    info = _run_info(tmp_path / "artifacts")

    def answer(path: str, headers, body) -> tuple[int, dict]:
        seen.append((path.split("?")[0], headers.get("Authorization")))
        if "experiments/get-by-name" in path:
            return 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "none"}
        if "experiments/create" in path:
            return 200, {"experiment_id": "1"}
        if "runs/create" in path:
            return 200, {"run": {"info": info, "data": {}}}
        if "runs/update" in path:
            return 200, {"run_info": {**info, "status": "FINISHED"}}
        return 200, {}

    with json_server(answer) as url:
        yield url, seen


def test_credentials_reach_the_server_and_leave_the_environment_alone(
    tracking_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trinity.monitor.mlflow import MlflowMonitor

    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.mlflow/credentials
    uri, seen = tracking_server
    before = dict(os.environ)
    run = RunInfo(project="proj", name="exp", role="trainer", job_dir=tmp_path / "job")
    monitor = MlflowMonitor(run, {"uri": uri, "username": "ada", "password": "s3cret"})
    assert dict(os.environ) == before
    monitor.log({"actor/pg_loss": 0.5}, step=1)
    monitor.close()
    assert dict(os.environ) == before

    paths = [path for path, _ in seen]
    assert any("runs/create" in p for p in paths) and any("runs/log-batch" in p for p in paths)
    expected = "Basic " + base64.b64encode(b"ada:s3cret").decode()
    assert {auth for _, auth in seen} == {expected}, seen
