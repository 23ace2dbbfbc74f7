"""``monitor.monitor_type``: one name or several comma-separated, built in or registered
by a ``--plugin-dir`` plugin; a name the run could not build fails at ``--dry-run``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from trinity.config import ConfigError, load_config
from trinity.config.lookups import check_lookups

REPO = Path(__file__).resolve().parents[3]


def write_config(data: dict[str, Any], tmp_path: Path, monitor_type: str) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"prompt": "1+1", "response": "2"}\n')
    data["buffer"]["explorer_input"]["taskset"]["path"] = str(tasks)
    data["monitor"] = {"monitor_type": monitor_type}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def write_plugin(tmp_path: Path) -> tuple[Path, str]:
    """A plugin dir whose monitor appends each record to <monitor dir>/<name>.txt."""
    name = f"monitor_{tmp_path.name.replace('-', '_')}"  # unique: the registry outlives a test
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / f"{name}.py").write_text(
        "from trinity.monitor.base import Monitor\n"
        "from trinity.monitor.registry import MONITORS\n\n"
        f"@MONITORS.register('{name}')\n"
        "class FileMonitor(Monitor):\n"
        "    def __init__(self, run, monitor_args):\n"
        f"        self.path = run.monitor_dir / '{name}.txt'\n"
        "        self.path.parent.mkdir(parents=True, exist_ok=True)\n"
        "    def log(self, metrics, step):\n"
        "        with open(self.path, 'a') as f:\n"
        "            f.write(f'{step} {dict(metrics)}\\n')\n"
        "    def close(self):\n"
        "        pass\n"
    )
    return plugins, name


def dry_run(path: Path, *plugin_dirs: Path) -> subprocess.CompletedProcess:
    plugin_args = [arg for d in plugin_dirs for arg in ("--plugin-dir", str(d))]
    return subprocess.run(
        [sys.executable, "-m", "trinity", "run", "--config", str(path), "--dry-run", *plugin_args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_plugin_monitor_in_a_comma_separated_list(
    minimal: dict[str, Any], tmp_path: Path
) -> None:
    from trinity.launch.run import load_plugins
    from trinity.monitor import MONITORS, make_monitor

    plugins, name = write_plugin(tmp_path)
    path = write_config(minimal, tmp_path, f"tensorboard, {name}")
    without = dry_run(path)
    assert without.returncode == 2
    [line] = without.stderr.splitlines()
    assert line.startswith("trinity: config error: monitor.monitor_type: unknown monitor")
    assert dry_run(path, plugins).returncode == 0

    load_plugins([plugins])
    try:
        cfg = load_config(path)
        check_lookups(cfg)
        job_dir = tmp_path / "job"
        monitor = make_monitor(
            cfg.monitor.monitor_type, project="p", name="n", role="trainer", job_dir=job_dir
        )
        with monitor:
            monitor.log({"loss": 0.5}, 1)
    finally:  # the registry is process-wide: other tests compare it with the built-ins
        MONITORS._items.pop(name, None)
    assert (job_dir / "monitor" / f"{name}.txt").read_text() == "1 {'loss': 0.5}\n"
    assert list((job_dir / "monitor" / "tensorboard").iterdir())  # the other one ran too


def test_a_misspelt_monitor_names_the_key_and_the_valid_names(
    minimal: dict[str, Any], tmp_path: Path
) -> None:
    cfg = load_config(write_config(minimal, tmp_path, "console,tensorbaord"))
    with pytest.raises(ConfigError) as err:
        check_lookups(cfg)
    assert err.value.path == "monitor.monitor_type"
    assert "tensorboard" in str(err.value) and "wandb" in str(err.value)
