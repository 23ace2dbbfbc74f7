"""What the ``trinity`` subcommands share: exit codes, and importing the user's plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trinity.config import TrainerConfig

EXIT_CONFIG_ERROR = 2
EXIT_INTERRUPTED = 130  # as a shell reports a process ended by SIGINT


def load_plugins(plugin_dirs: list[str]) -> None:
    """Import every module directly inside the named directories (registers their parts).

    The run's actors import the same directories again in their own processes.
    """
    from trinity.launch.run import PluginError, load_plugins

    try:
        load_plugins(plugin_dirs)
    except PluginError as err:
        raise SystemExit(f"trinity: {err}") from None


def load_external_libs(trainer: TrainerConfig) -> None:
    """Import the ``external_lib`` modules of ``trainer`` (before the names the run looks
    up are checked)."""
    from trinity.launch.run import PluginError, load_external_libs

    try:
        load_external_libs(trainer)
    except PluginError as err:
        raise SystemExit(f"trinity: config error: {err}") from None
