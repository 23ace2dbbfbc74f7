"""The user's code a run imports in every process: ``--plugin-dir`` modules and
``model.external_lib``.

The driver imports them before the run's names (workflows, reward functions, algorithm
parts) are looked up, and every actor imports them again first thing
(``actor_start.start_actor``), so what they register exists in each process.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from trinity.config import TrainerConfig, trainer_settings

PLUGIN_MODULE_PREFIX = "trinity_plugin_"


class PluginError(RuntimeError):
    """A ``--plugin-dir`` is not a directory or one of its modules failed to import."""


def load_plugins(plugin_dirs: Sequence[str | Path]) -> list[str]:
    """Import every ``*.py`` module directly inside ``plugin_dirs``; returns their names.

    Importing a module runs its registrations (workflows, reward functions, algorithm
    parts). A module already imported in this process is not imported again, so calling
    this in the driver and again in each actor is safe.
    """
    names = []
    for directory in plugin_dirs:
        path = Path(directory)
        if not path.is_dir():
            raise PluginError(f"--plugin-dir '{directory}' is not a directory")
        if str(path.resolve()) not in sys.path:
            sys.path.insert(0, str(path.resolve()))
        for file in sorted(path.glob("*.py")):
            name = f"{PLUGIN_MODULE_PREFIX}{file.stem}"
            names.append(name)
            if name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(name, file)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[name]
                raise PluginError(f"plugin module {file} failed to import: {exc!r}") from exc
    return names


def load_external_libs(trainer: TrainerConfig) -> list[str]:
    """Import the modules ``model.external_lib`` names (the actor's, then the critic's).

    veRL's key: a module that registers custom architectures with transformers' Auto
    classes before a model is built; it may register workflows or reward functions too.
    Called in the driver before the run's names are looked up and first in every actor.
    """
    settings = trainer_settings(trainer)
    names: list[str] = []
    for key, name in (
        ("actor_rollout_ref.model.external_lib", settings.policy.external_lib),
        ("critic.model.external_lib", settings.critic.external_lib),
    ):
        if not name or name in names:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise PluginError(
                f"trainer.trainer_config.{key}: cannot import module '{name}' ({exc!r}); "
                "it must be importable in every process (installed, on PYTHONPATH, or in a "
                "--plugin-dir)"
            ) from exc
        names.append(name)
    return names
