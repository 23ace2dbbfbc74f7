"""Trinity-RFT spellings the typed schema cannot take as written, read before the build.

- ``task_selector`` as a section (v0.6's spelling: ``selector_type``, ``seed``,
  ``feature_keys``, ``kwargs``) is the ``data_selector`` section here, where
  ``task_selector`` is the plain order name; a storage giving both sections fails.
- ``explorer.runner_num`` (the older spelling) counts workflow runners over all rollout
  engines; ``explorer.runner_per_model`` counts them per engine. Without a
  ``runner_per_model`` beside it, ``runner_per_model = ceil(runner_num /
  rollout_model.engine_num)`` is written in; with one, ``runner_per_model`` wins, as it
  does in Trinity-RFT. ``runner_num`` stays in the data, so ``load_config`` can log it.

``upstream_spellings`` returns new data and leaves the mapping it reads unchanged.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Mapping
from typing import Any

from trinity.config.errors import ConfigError


def upstream_spellings(data: Any) -> Any:
    """``data`` (a config as plain data) with Trinity-RFT's spellings turned into ours;
    anything but a mapping is returned as is, for the build to refuse."""
    if not isinstance(data, Mapping):
        return data
    out = copy.deepcopy(dict(data))
    sections = [("", out)]
    stages = out.get("stages")
    stages = stages if isinstance(stages, list) else []
    for index, stage in enumerate(stages):
        if isinstance(stage, dict):
            sections.append((f"stages[{index}].", stage))
    for prefix, section in sections:
        for path, storage in _storages(section.get("buffer"), f"{prefix}buffer"):
            _selector_section(path, storage)
    _runner_num(out.get("explorer"), None)
    for stage in stages:
        if isinstance(stage, dict):
            _runner_num(stage.get("explorer"), out.get("explorer"))
    return out


def runners_per_engine(runner_num: int, engine_num: int) -> int:
    """The ``runner_per_model`` that runs at least ``runner_num`` runners on ``engine_num``
    engines (the older total, spread evenly)."""
    return max(1, math.ceil(runner_num / engine_num))


def _runner_num(explorer: Any, outer: Any) -> None:
    """Write ``runner_per_model`` from ``runner_num`` into ``explorer`` when it names no
    ``runner_per_model``; ``outer`` is the run's explorer section a stage inherits from.
    Values that are not positive integers are left for the build and validate to name."""
    if not isinstance(explorer, dict) or "runner_per_model" in explorer:
        return
    total = _as_int(explorer.get("runner_num"))
    engines = _engine_num(explorer)
    if engines is None and isinstance(outer, Mapping):
        engines = _engine_num(outer)
    engines = 1 if engines is None else _as_int(engines)
    if total is not None and total >= 1 and engines is not None and engines >= 1:
        explorer["runner_per_model"] = runners_per_engine(total, engines)


def _engine_num(explorer: Mapping[str, Any]) -> Any:
    rollout = explorer.get("rollout_model")
    return rollout.get("engine_num") if isinstance(rollout, Mapping) else None


def _as_int(value: Any) -> int | None:
    """An integer, or a string spelling one (as an ``${oc.env:...}`` gives); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value)
    return None


def _selector_section(path: str, storage: dict[str, Any]) -> None:
    selector = storage.get("task_selector")
    if not isinstance(selector, Mapping):
        return
    if storage.get("data_selector") is not None:
        raise ConfigError(
            f"{path}.task_selector",
            "is a selector section, and data_selector gives another: the same section twice",
            value=dict(selector),
            valid="one of task_selector (section) or data_selector",
        )
    storage["data_selector"] = storage.pop("task_selector")


def _storages(buffer: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every taskset and buffer mapping of a ``buffer`` section, with its key path."""
    if not isinstance(buffer, Mapping):
        return
    explorer_input = buffer.get("explorer_input")
    if isinstance(explorer_input, Mapping):
        taskset = explorer_input.get("taskset")
        if isinstance(taskset, dict):
            yield f"{path}.explorer_input.taskset", taskset
        for key in ("tasksets", "eval_tasksets"):
            items = explorer_input.get(key)
            for i, item in enumerate(items if isinstance(items, list) else []):
                if isinstance(item, dict):
                    yield f"{path}.explorer_input.{key}[{i}]", item
    trainer_input = buffer.get("trainer_input")
    if isinstance(trainer_input, Mapping):
        experience = trainer_input.get("experience_buffer")
        if isinstance(experience, dict):
            yield f"{path}.trainer_input.experience_buffer", experience
        auxiliary = trainer_input.get("auxiliary_buffers")
        for name, item in (auxiliary if isinstance(auxiliary, Mapping) else {}).items():
            if isinstance(item, dict):
                yield f"{path}.trainer_input.auxiliary_buffers.{name}", item
