"""MLflow monitor (``pip install mlflow``; imported only when selected).

Runs ``<name>_explorer`` and ``<name>_trainer`` are created in the experiment named
``<project>``. ``monitor_args``: ``uri`` (else MLFLOW_TRACKING_URI, else
``http://localhost:5000``); ``username`` and ``password`` override
MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD. MLflow's client takes no
credentials, only those variables: the monitor sets them while its own calls run and
restores the environment after, so the process (and what it starts) keeps none of
them. The config is stored as the
artifact ``config.json``. Characters MLflow rejects in metric names (such as ``@`` in
``mean@4``) become ``_``.

With a database URI and no server (``sqlite:///mlflow.db``), MLflow would put
artifacts in ``./mlruns`` of whatever directory the actor runs in; a new experiment
then keeps them in ``<checkpoint_root_dir>/<project>/mlflow_artifacts`` instead. A
tracking server (``http://...``) chooses its own artifact store.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from trinity.monitor.base import Monitor, RunInfo
from trinity.monitor.registry import MONITORS
from trinity.utils.environment import scoped_environment

DEFAULT_URI = "http://localhost:5000"
BATCH_LIMIT = 1000  # metrics per log_batch request accepted by the tracking server
_INVALID_KEY_CHARS = re.compile(r"[^\w\-. /:]")
_DATABASE_SCHEMES = {"sqlite", "postgresql", "mysql", "mssql"}
ARTIFACTS_DIR = "mlflow_artifacts"


_CREDENTIALS = (("username", "MLFLOW_TRACKING_USERNAME"), ("password", "MLFLOW_TRACKING_PASSWORD"))
_environment_lock = threading.Lock()


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in the environment for the duration of the block, then as it was (one
    block at a time in this process)."""
    if not values:
        yield
        return
    with _environment_lock, scoped_environment(values):
        yield


def mlflow_key(key: str) -> str:
    return _INVALID_KEY_CHARS.sub("_", key)


def artifact_location(uri: str, run: RunInfo) -> str | None:
    """Where a new experiment keeps artifacts: the project directory for a database URI."""
    if urlparse(uri).scheme.split("+")[0] not in _DATABASE_SCHEMES:
        return None  # a server or a file store knows where artifacts go
    return (Path(run.job_dir).resolve().parent / ARTIFACTS_DIR).as_uri()


@MONITORS.register("mlflow")
class MlflowMonitor(Monitor):
    def __init__(self, run: RunInfo, monitor_args: Mapping[str, Any]) -> None:
        try:
            from mlflow.entities import Metric
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise ImportError(
                "monitor.monitor_type 'mlflow' needs the mlflow package: run `pip install mlflow`, "
                "or choose monitor.monitor_type: tensorboard"
            ) from exc
        self._credentials = {
            env: str(monitor_args[arg]) for arg, env in _CREDENTIALS if monitor_args.get(arg)
        }
        uri = monitor_args.get("uri") or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI
        self._metric = Metric
        with _environment(self._credentials):
            self.client = MlflowClient(tracking_uri=str(uri))
            experiment = self.client.get_experiment_by_name(run.project)
            if experiment is not None:
                experiment_id = experiment.experiment_id
            else:
                experiment_id = self.client.create_experiment(
                    run.project, artifact_location=artifact_location(str(uri), run)
                )
            created = self.client.create_run(
                experiment_id, run_name=run.run_name, tags={"trinity.role": run.role}
            )
            self.run_id = created.info.run_id
            if run.config_dict:
                self.client.log_dict(self.run_id, dict(run.config_dict), "config.json")

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        timestamp = int(time.time() * 1000)
        batch = [
            self._metric(key=mlflow_key(key), value=value, timestamp=timestamp, step=int(step))
            for key, value in metrics.items()
        ]
        with _environment(self._credentials):
            for start in range(0, len(batch), BATCH_LIMIT):
                self.client.log_batch(self.run_id, metrics=batch[start : start + BATCH_LIMIT])

    def close(self) -> None:
        with _environment(self._credentials):
            self.client.set_terminated(self.run_id)
