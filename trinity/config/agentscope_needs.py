"""What the AgentScope workflows need on this machine, checked before a run starts.

``check_agentscope`` (run by ``check_lookups``, so by ``--dry-run`` too) stops a config
whose taskset names one of them in one line when the ``agentscope`` package is missing,
an adapter has no importable ``workflow_args.workflow_func``, or the web-search
workflow lacks what its search server needs (``npx``, the search service's variable,
the judge model). Torch-free and without importing agentscope.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from typing import Any

from trinity.config.errors import ConfigError

ADAPTERS = frozenset({"agentscope_workflow_adapter", "agentscope_workflow_adapter_v1"})
SEARCH = "agentscope_v1_react_search_workflow"
AGENTSCOPE_WORKFLOWS: frozenset[str] = ADAPTERS | {
    "agentscope_react_workflow",
    "as_react_workflow",
    "agentscope_react_math_workflow",
    "agentscopev0_react_math_workflow",
    "agentscope_reactv2_math_workflow",
    SEARCH,
}
# search_client_type -> the variable its MCP server reads (Trinity-RFT's two)
SEARCH_VARIABLES = {"searxng": "SEARXNG_URL", "tavily": "TAVILY_API_KEY"}


def check_agentscope(
    path: str, name: str, workflow_args: dict[str, Any] | None, has_judge: bool
) -> None:
    """ConfigError when the taskset's workflow ``name`` (at key ``path``) is an
    AgentScope workflow that could not run here; ``has_judge``: an auxiliary model exists."""
    if name not in AGENTSCOPE_WORKFLOWS:
        return
    args = dict(workflow_args or {})
    section = path.rsplit(".", 1)[0]
    if importlib.util.find_spec("agentscope") is None:
        raise ConfigError(
            path,
            "needs the agentscope package, which is not installed",
            value=name,
            valid="pip install 'trinity-rft[agentscope]'",
        )
    if name in ADAPTERS:
        for key in ("workflow_func", "judge_func"):
            _check_function(f"{section}.workflow_args.{key}", args.get(key), key == "judge_func")
    if name == SEARCH:
        _check_search(path, name, args, has_judge)


def _check_function(path: str, value: Any, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or "." not in value.replace(":", "."):
        raise ConfigError(
            path,
            "must name the agent's async function",
            value=value,
            valid="a dotted path pkg.module.func (a --plugin-dir module counts)",
        )
    module = value.rpartition(":")[0] if ":" in value else value.rpartition(".")[0]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or not a package
        found = False
    if not found:
        raise ConfigError(path, f"module '{module}' is not importable", value=value)


def _check_search(path: str, name: str, args: dict[str, Any], has_judge: bool) -> None:
    kind = args.get("search_client_type", "searxng")
    if kind not in SEARCH_VARIABLES:
        raise ConfigError(
            f"{path.rsplit('.', 1)[0]}.workflow_args.search_client_type",
            "is not a search client",
            value=kind,
            valid=", ".join(SEARCH_VARIABLES),
        )
    variable = SEARCH_VARIABLES[kind]
    missing = [
        what
        for what, absent in (
            ("npx (Node.js) on PATH to start the search MCP server", not shutil.which("npx")),
            (f"${variable}", not os.environ.get(variable)),
            ("a judge model as explorer.auxiliary_models[0]", not has_judge),
        )
        if absent
    ]
    if missing:
        raise ConfigError(
            path,
            f"searches the web through {kind}'s MCP server and needs network access, "
            f"{', '.join(missing)}",
            value=name,
        )
