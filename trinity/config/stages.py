"""Multi-stage runs: each stage is the global config with the stage's sections merged in.

A stage's ``algorithm``/``buffer``/``explorer``/``trainer`` mapping is deep-merged onto the
global section, so whatever the stage leaves out is inherited. Lists are replaced as a
whole. A storage (taskset, experience buffer, auxiliary buffer) that the stage gives a
different ``name`` is a different storage, so it inherits nothing from the global one:
the SFT dataset of a warm-up stage must not keep the global queue's settings.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Union

from trinity.config.derived import SOURCE_ATTR, resolve, resolve_run, timestamped
from trinity.config.errors import ConfigError
from trinity.config.schema import STAGE_SECTIONS, Config, StageConfig, StorageConfig
from trinity.config.typed_yaml import build, field_types, to_plain


def apply_stage(base: Config, stage: StageConfig, index: int) -> Config:
    """The global config with stage ``index`` merged in (not resolved; ``stages`` emptied).

    Raises:
        ConfigError: a stage key or value that is not valid, with its ``stages[i]...`` path.
    """
    plain = to_plain(base)
    staged = copy.deepcopy(base)
    staged.stages = []
    if stage.mode is not None:
        staged.mode = stage.mode
    for section in STAGE_SECTIONS:
        override = getattr(stage, section)
        if override is None:
            continue
        cls = type(getattr(base, section))
        if not isinstance(override, Mapping):
            raise ConfigError(
                f"stages[{index}].{section}",
                "must be a mapping",
                value=override,
                valid=f"keys of {section}",
            )
        merged = _merge(cls, plain[section], override)
        setattr(staged, section, build(cls, merged, f"stages[{index}].{section}"))
    return staged


def expand_stages(cfg: Config, *, now: datetime) -> list[Config]:
    """One resolved and validated config per stage, in order; ``[cfg]`` (resolved) without stages.

    ``cfg`` may be resolved (as returned by ``load_config``) or not: stages are always
    expanded from the unresolved config, since derived values differ between stages. Stage
    ``i`` runs as experiment ``<name>/<stage_name>`` (``<name>_<timestamp>/<stage_name>``
    when ``continue_from_checkpoint`` is false); every stage shares the timestamp.
    """
    from trinity.config.validate import validate

    source = getattr(cfg, SOURCE_ATTR, None)
    base = source if source is not None else cfg
    if not base.stages:
        return [cfg if source is not None else resolve(cfg, now=now)]
    run_name = base.name if base.continue_from_checkpoint else timestamped(base.name, now)
    configs = []
    for index, stage in enumerate(base.stages):
        staged = apply_stage(base, stage, index)
        staged.name = f"{run_name}/{stage.stage_name}"
        try:
            resolved = resolve_run(staged, now=now, rename=False)
            validate(resolved)
        except ConfigError as err:
            raise err.within(f"stage '{stage.stage_name}'") from None
        configs.append(resolved)
    return configs


def _merge(tp: Any, old: Any, new: Any) -> Any:
    """Deep-merge ``new`` onto ``old`` where both are mappings, guided by the schema type ``tp``."""
    if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
        return copy.deepcopy(new)
    cls = _dataclass_in(tp)
    if cls is not None:
        if issubclass(cls, StorageConfig) and "name" in new and new["name"] != old.get("name"):
            return copy.deepcopy(dict(new))
        types_ = field_types(cls)
        return {
            **copy.deepcopy(dict(old)),
            **{k: _merge(types_.get(k, Any), old.get(k), v) for k, v in new.items()},
        }
    value_tp = typing.get_args(tp)[1] if typing.get_origin(tp) is dict else Any
    return {
        **copy.deepcopy(dict(old)),
        **{k: _merge(value_tp, old.get(k), v) for k, v in new.items()},
    }


def _dataclass_in(tp: Any) -> type | None:
    """The dataclass of ``tp`` or of ``tp | None``, if it is one."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = inner[0] if len(inner) == 1 else None
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None
