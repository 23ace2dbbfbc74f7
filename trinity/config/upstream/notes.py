"""What ``load_config`` logs about Trinity-RFT's older spellings and veRL-layout contradictions.

Each line is a warning of the ``trinity.config`` logger:

- ``explorer.runner_num``, Trinity-RFT's older spelling of ``explorer.runner_per_model``
  (``spellings.py`` converts it): what it was read as, or that ``runner_per_model`` wins;
- a veRL-layout actor optimizer (``trainer.trainer_config.actor_rollout_ref.actor.optim``)
  that differs from ``algorithm.optimizer``, which the run uses, as Trinity-RFT does.

``config_notes`` reads the config as written (``read_config``): resolve overwrites the
actor optimizer.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from trinity.config.errors import format_value
from trinity.config.schema import Config, OptimizerConfig
from trinity.config.stages import apply_stage
from trinity.config.upstream.spellings import runners_per_engine

logger = logging.getLogger("trinity.config")

ACTOR_OPTIM = "trainer.trainer_config.actor_rollout_ref.actor.optim"


def config_notes(cfg: Config) -> list[str]:
    """One line per older spelling or contradiction of ``cfg`` (unresolved), stages included."""
    explorer = cfg.explorer
    notes = _runner_num_note(
        "explorer.",
        explorer.runner_num,
        explorer.runner_per_model,
        explorer.rollout_model.engine_num,
    )
    optimizer = optimizer_differences(cfg)
    if optimizer:
        notes.append(_optimizer_note("", optimizer))
    for index, stage in enumerate(cfg.stages):
        where = f"stages[{index}]."
        override = stage.explorer if isinstance(stage.explorer, Mapping) else {}
        if "runner_num" in override:
            staged = apply_stage(cfg, stage, index).explorer
            notes += _runner_num_note(
                f"{where}explorer.",
                staged.runner_num,
                staged.runner_per_model,
                staged.rollout_model.engine_num,
            )
        if isinstance(stage.trainer, Mapping) or isinstance(stage.algorithm, Mapping):
            own = [
                d
                for d in optimizer_differences(apply_stage(cfg, stage, index))
                if d not in optimizer
            ]
            if own:
                notes.append(_optimizer_note(where, own))
    return notes


def log_config_notes(cfg: Config) -> None:
    for line in config_notes(cfg):
        logger.warning(line)


def _runner_num_note(
    where: str, runner_num: int | None, per_model: int, engine_num: int
) -> list[str]:
    if runner_num is None or runner_num < 1 or engine_num < 1:
        return []  # unset, or validate names the value
    old = f"{where}runner_num is Trinity-RFT's older spelling of {where}runner_per_model"
    if per_model == runners_per_engine(runner_num, engine_num):
        return [
            f"{old} (runners per rollout engine): {runner_num} runner(s) over {engine_num} "
            f"engine(s) read as runner_per_model: {per_model}"
        ]
    return [f"{old}, which is set ({per_model}): runner_num ({runner_num}) is ignored"]


def _optimizer_note(where: str, differences: list[tuple[str, Any, Any]]) -> str:
    parts = [
        f"{where}{ACTOR_OPTIM}.{name} ({format_value(mine)}) differs from "
        f"{where}algorithm.optimizer.{name} ({format_value(used)})"
        for name, mine, used in differences
    ]
    return "; ".join(parts) + f"; the run uses {where}algorithm.optimizer"


def optimizer_differences(cfg: Config) -> list[tuple[str, object, object]]:
    """``(field, actor value, algorithm.optimizer value)`` of each field the veRL-layout
    actor optimizer (``trainer.trainer_config.actor_rollout_ref.actor.optim``) sets to
    another value than ``algorithm.optimizer``, which resolve uses. A field the actor
    optimizer leaves at its default is taken as not given; ``total_training_steps`` is
    filled from the run's length and not compared."""
    tc = cfg.trainer.trainer_config
    given = tc.actor_rollout_ref.actor.optim if tc is not None else None
    if given is None:
        return []
    default, used = OptimizerConfig(), cfg.algorithm.optimizer
    found = []
    for f in dataclasses.fields(OptimizerConfig):
        if f.name == "total_training_steps":
            continue
        mine, theirs = getattr(given, f.name), getattr(used, f.name)
        if mine != theirs and mine != getattr(default, f.name):
            found.append((f.name, mine, theirs))
    return found
