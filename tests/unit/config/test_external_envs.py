"""Trinity-RFT's workflows whose environment no package registry holds: their names and
``workflow_args`` load, and the dry run stops in one line saying what to install or
download and where to point the config."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from trinity.config import ConfigError, config_from_dict, resolve
from trinity.config.lookups import check_lookups

REPO = Path(__file__).resolve().parents[3]
PATH = "buffer.explorer_input.tasksets[0].default_workflow_type"
# workflow -> upstream workflow_args it is given, and what its line must name
CASES = {
    "alfworld_workflow": ({"max_env_steps": 5}, ["alfworld-download", "$ALFWORLD_DATA"]),
    "step_wise_alfworld_workflow": ({"max_env_steps": 5}, ["ALFWorld", "game.tw-pddl"]),
    "RAFT_alfworld_workflow": ({}, ["pip install alfworld"]),
    "RAFT_reflect_alfworld_workflow": ({}, ["pip install alfworld"]),
    "webshop_workflow": ({}, ["web_agent_site", "princeton-nlp/WebShop"]),
    "email_search_workflow": (
        {"max_turns": 4, "tool_obs_char_limit": 500},
        ["DEFAULT_EMAIL_DB_PATH", "prepare_data.py"],
    ),
    "intercode_sql_workflow": (
        {"max_env_steps": 3, "image_name": "docker-env-sql", "auto_submit": False},
        ["intercode-bench", "workflow_args.data_path", "docker-env-sql"],
    ),
}


@pytest.fixture(autouse=True)
def no_environments(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "alfworld"))
    monkeypatch.delenv("DEFAULT_EMAIL_DB_PATH", raising=False)


def _with(data: dict[str, Any], name: str, args: dict[str, Any]) -> dict[str, Any]:
    data["buffer"]["default_workflow_type"] = name
    data["buffer"]["explorer_input"]["taskset"]["workflow_args"] = args
    return data


def _failure(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        now = datetime(2024, 5, 6, 7, 8, 9)
        check_lookups(resolve(config_from_dict(data), now=now), now=now)
    return caught.value


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_names_what_to_install_and_where_to_point(data, name: str) -> None:
    args, words = CASES[name]
    err = _failure(_with(data, name, args))
    assert err.path == PATH and err.value == name
    message = str(err)
    assert "\n" not in message and "no package registry holds" in message
    for word in words:
        assert word in message


def test_an_argument_upstream_does_not_read_is_named(data) -> None:
    err = _failure(_with(data, "alfworld_workflow", {"max_env_step": 5}))
    assert err.path == "buffer.explorer_input.tasksets[0].workflow_args.max_env_step"
    assert "its workflow_args: max_env_steps" in str(err)


def test_the_workflow_raises_the_same_line(data) -> None:
    from trinity.types import Task
    from trinity.workflows import WORKFLOWS
    from trinity.workflows.external_envs import EnvironmentUnavailableError

    task = Task(raw={"game_file": "x"}, workflow="webshop_workflow", reward_fn=None)
    workflow = WORKFLOWS.get("webshop_workflow")(task, model=None)  # type: ignore[arg-type]
    with pytest.raises(EnvironmentUnavailableError, match="web_agent_site"):
        workflow.run()


def test_dry_run_prints_the_line(data, tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(_with(data, "alfworld_workflow", {})), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "trinity", "run", "--config", str(config), "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout
    [line] = done.stderr.splitlines()
    assert line.startswith(f"trinity: config error: {PATH}: alfworld_workflow needs ALFWorld")
    assert "alfworld-download" in line
