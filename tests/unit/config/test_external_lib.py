"""``model.external_lib``: the module is imported before the run's names are looked up
(``trinity run``, ``--dry-run``) and first in every actor (``start_actor``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
EXTERNAL_LIB = "trainer.trainer_config.actor_rollout_ref.model.external_lib"


def write_lib(tmp_path: Path) -> tuple[Path, str, str]:
    """A package ``<lib>.models`` in tmp_path/libs that registers the workflow ``<lib>_flow``."""
    lib = f"extlib_{tmp_path.name.replace('-', '_')}"  # unique: registries outlive a test
    package = tmp_path / "libs" / lib
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(
        "from trinity.workflows import WORKFLOWS\n"
        "from trinity.workflows.math_workflow import MathWorkflow\n\n"
        f"@WORKFLOWS.register('{lib}_flow')\n"
        "class Flow(MathWorkflow):\n"
        "    pass\n"
    )
    return tmp_path / "libs", f"{lib}.models", f"{lib}_flow"


def config_with(data: dict[str, Any], tmp_path: Path, module: str | None, flow: str) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"prompt": "1+1", "response": "2"}\n')
    data["buffer"]["explorer_input"]["taskset"]["path"] = str(tasks)
    data["buffer"]["default_workflow_type"] = flow
    if module is not None:
        data.setdefault("trainer", {})["trainer_config"] = {
            "actor_rollout_ref": {"model": {"external_lib": module}}
        }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def dry_run(path: Path, libs: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trinity", "run", "--config", str(path), "--dry-run"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(libs)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dry_run_imports_the_external_lib_before_checking_names(
    minimal: dict[str, Any], tmp_path: Path
) -> None:
    libs, module, flow = write_lib(tmp_path)
    without = dry_run(config_with(dict(minimal), tmp_path, None, flow), libs)
    assert without.returncode == 2 and f"unknown workflow (given: '{flow}'" in without.stderr
    done = dry_run(config_with(minimal, tmp_path, module, flow), libs)
    assert done.returncode == 0, done.stderr


def test_a_module_that_does_not_import_names_the_key(
    minimal: dict[str, Any], tmp_path: Path
) -> None:
    path = config_with(minimal, tmp_path, "no_such_extlib.models", "math_workflow")
    done = dry_run(path, tmp_path)
    assert done.returncode != 0
    [line] = done.stderr.splitlines()
    assert line.startswith(f"trinity: config error: {EXTERNAL_LIB}: cannot import module")
    assert "no_such_extlib" in line


def test_every_actor_imports_it_first(
    minimal: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trinity.config import load_config
    from trinity.launch.actor_start import start_actor
    from trinity.utils.log import get_actor_logger
    from trinity.workflows import WORKFLOWS

    libs, module, flow = write_lib(tmp_path)
    monkeypatch.syspath_prepend(str(libs))
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)  # process-wide otherwise
    cfg = load_config(config_with(minimal, tmp_path, module, flow))
    assert flow not in WORKFLOWS.names()
    name = f"external_lib_test_{tmp_path.name}"
    try:
        start_actor(cfg, tmp_path / "job", name, [])
        get_actor_logger(name, None)  # detaches the actor's log file from the trinity loggers
        assert flow in WORKFLOWS.names()
    finally:  # the registry is process-wide: other tests compare it with the built-ins
        WORKFLOWS._items.pop(flow, None)
