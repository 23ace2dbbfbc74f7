"""--dry-run's checks of the AgentScope workflows: what the web-search agent needs, and an
adapter's agent function, each stopped in one line naming the key."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from trinity.config import ConfigError, config_from_dict, resolve
from trinity.config.lookups import check_lookups

pytest.importorskip("agentscope")  # without it every check stops at the missing package

NOW = datetime(2024, 5, 6, 7, 8, 9)
KEY = "buffer.explorer_input.tasksets[0].default_workflow_type"


def check(data: dict[str, Any], workflow: str, workflow_args: dict[str, Any]) -> None:
    taskset = data["buffer"]["explorer_input"]["taskset"]
    taskset.update(default_workflow_type=workflow, workflow_args=workflow_args)
    check_lookups(resolve(config_from_dict(data), now=NOW), now=NOW)


def test_search_agent_stops_naming_what_it_needs(
    data: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no npx
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    args = {"max_turns": 10, "search_client_type": "tavily"}
    with pytest.raises(ConfigError) as err:
        check(data, "agentscope_v1_react_search_workflow", args)
    assert err.value.path == KEY
    message = str(err.value)
    assert "\n" not in message
    for need in ("network", "npx", "$TAVILY_API_KEY", "explorer.auxiliary_models[0]"):
        assert need in message, message

    with pytest.raises(ConfigError) as err:
        check(data, "agentscope_v1_react_search_workflow", {"search_client_type": "bing"})
    assert err.value.path.endswith("tasksets[0].workflow_args.search_client_type")
    assert "searxng, tavily" in str(err.value)


def test_adapter_needs_an_importable_agent_function(data: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as err:
        check(data, "agentscope_workflow_adapter_v1", {})
    assert err.value.path.endswith("tasksets[0].workflow_args.workflow_func")
    with pytest.raises(ConfigError, match="module 'no_such_pkg.agents' is not importable"):
        check(data, "agentscope_workflow_adapter", {"workflow_func": "no_such_pkg.agents.run"})


def test_react_math_agent_passes(data: dict[str, Any]) -> None:
    check(data, "agentscope_react_math_workflow", {"tools": ["calculator"]})
    check(data, "agentscope_workflow_adapter", {"workflow_func": "json.loads"})
