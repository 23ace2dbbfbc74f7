"""Trinity-RFT's workflows whose environment no package registry holds.

ALFWorld's game files, WebShop's product set, the Enron e-mail database and InterCode's
Docker images are downloaded or built by hand. Their workflows are registered here
under Trinity-RFT's names, with the ``workflow_args`` Trinity-RFT reads (any other key
is refused by name), so an upstream config loads; ``check_external_env`` (run by
``check_lookups``, so by ``--dry-run`` too) then stops it in one line saying what to
install or download and where to point the config. Their rollouts are not part of this
build: with the environment in place the line says so instead.

Torch-free: ``trinity.config.lookups`` imports it; ``trinity.workflows.external_envs``
registers a workflow per name from ``EXTERNAL_ENVS``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trinity.config.errors import ConfigError


@dataclass(frozen=True)
class ExternalEnv:
    """What one environment needs and how to tell whether this machine has it."""

    title: str  # the environment, as the message names it
    needs: str  # what to install or download and where to point the config
    # workflow name -> its workflow_args and their defaults, as Trinity-RFT reads them
    workflows: dict[str, dict[str, Any]] = field(default_factory=dict)
    # None when this machine has the environment, else what is missing (a few words)
    missing: Callable[[dict[str, Any]], str | None] = lambda args: "not installed"


def _alfworld_missing(args: dict[str, Any]) -> str | None:
    root = os.path.expanduser(os.environ.get("ALFWORLD_DATA", "~/.cache/alfworld"))
    if importlib.util.find_spec("alfworld") is None:
        return "the alfworld package is not installed"
    if not os.path.isdir(os.path.join(root, "json_2.1.1")):
        return f"no game files under {root}/json_2.1.1"
    return None


def _webshop_missing(args: dict[str, Any]) -> str | None:
    if importlib.util.find_spec("web_agent_site") is None:
        return "the web_agent_site package is not installed"
    return None


def _email_missing(args: dict[str, Any]) -> str | None:
    path = os.environ.get("DEFAULT_EMAIL_DB_PATH")
    if not path:
        return "DEFAULT_EMAIL_DB_PATH is not set"
    if not os.path.isfile(os.path.expanduser(path)):
        return f"DEFAULT_EMAIL_DB_PATH names no file ({path})"
    return None


def _intercode_missing(args: dict[str, Any]) -> str | None:
    if importlib.util.find_spec("intercode") is None:
        return "the intercode-bench package is not installed"
    path = args.get("data_path")
    if not path or not os.path.exists(os.path.expanduser(str(path))):
        return f"workflow_args.data_path names no file ({path})"
    return None


EXTERNAL_ENVS: tuple[ExternalEnv, ...] = (
    ExternalEnv(
        "ALFWorld",
        "pip install alfworld, then alfworld-download writes the game files to $ALFWORLD_DATA "
        "(default ~/.cache/alfworld); each task's prompt_key column names one "
        "$ALFWORLD_DATA/json_2.1.1/<split>/<task>/<trial>/game.tw-pddl (Trinity-RFT's "
        "examples/grpo_alfworld/get_alfworld_data.py writes such a taskset)",
        {
            "alfworld_workflow": {"max_env_steps": 30},
            "step_wise_alfworld_workflow": {"max_env_steps": 30},
            "RAFT_alfworld_workflow": {},
            "RAFT_reflect_alfworld_workflow": {},
        },
        _alfworld_missing,
    ),
    ExternalEnv(
        "WebShop",
        "install the web_agent_site package from github.com/princeton-nlp/WebShop (its "
        "setup.sh downloads the product set and builds the search index; the full set "
        "takes about 15 GB of memory); each task's prompt_key column holds a session id",
        {"webshop_workflow": {}},
        _webshop_missing,
    ),
    ExternalEnv(
        "the Enron e-mail search",
        "build the SQLite database with Trinity-RFT's email_searcher prepare_data.py (it "
        "downloads the corbt/enron-emails dataset), export DEFAULT_EMAIL_DB_PATH=<its "
        "enron_emails.db>, pip install agentscope, and give the judge model as "
        "explorer.auxiliary_models[0]",
        {"email_search_workflow": {"max_turns": 10, "tool_obs_char_limit": 2000}},
        _email_missing,
    ),
    ExternalEnv(
        "InterCode SQL",
        "pip install intercode-bench, build its MySQL Docker image (workflow_args.image_name, "
        "default docker-env-sql) from github.com/princeton-nlp/intercode with Docker "
        "running, and point workflow_args.data_path (or a data_path column) at its query file",
        {
            "intercode_sql_workflow": {
                "max_env_steps": 10,
                "image_name": "docker-env-sql",
                "verbose": False,
                "auto_submit": True,
                "data_path": None,
            }
        },
        _intercode_missing,
    ),
)
EXTERNAL_WORKFLOWS: dict[str, ExternalEnv] = {
    name: env for env in EXTERNAL_ENVS for name in env.workflows
}


def unavailable(name: str, workflow_args: dict[str, Any] | None = None) -> str:
    """The one line saying why ``name`` does not run here and what it needs."""
    env = EXTERNAL_WORKFLOWS[name]
    missing = env.missing(dict(workflow_args or {}))
    if missing is None:
        return (
            f"{name} needs {env.title}, which is found here, but this build does not "
            "run its rollouts; run it with Trinity-RFT"
        )
    return f"{name} needs {env.title}, which no package registry holds ({missing}): {env.needs}"


def check_external_env(path: str, name: str, workflow_args: dict[str, Any] | None) -> None:
    """ConfigError for a taskset naming one of these workflows: an argument it does not
    read, else what to install or download and where to point the config."""
    env = EXTERNAL_WORKFLOWS.get(name)
    if env is None:
        return
    accepted = env.workflows[name]
    for key in workflow_args or {}:
        if key not in accepted:
            valid = ", ".join(accepted) if accepted else "none"
            raise ConfigError(
                f"{path.rsplit('.', 1)[0]}.workflow_args.{key}",
                f"is not an argument of {name}",
                value=(workflow_args or {})[key],
                valid=f"its workflow_args: {valid}",
            )
    raise ConfigError(path, unavailable(name, workflow_args), value=name)
