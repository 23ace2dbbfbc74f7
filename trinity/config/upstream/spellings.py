"""Trinity-RFT spellings the typed schema cannot take as written, read before the build.

- ``task_selector`` as a section (v0.6's spelling: ``selector_type``, ``seed``,
  ``feature_keys``, ``kwargs``) is the ``data_selector`` section here, where
  ``task_selector`` is the plain order name; a storage giving both sections fails.
- ``mode: colocate`` is mode both with ``cluster.colocate`` (``trinity.config.colocate``).
- parts upstream has and this project does not: ``synchronizer.sync_method: hccl``
  (weights over Huawei Ascend NPUs), the engines ``sglang`` and ``tinker``,
  ``trainer.trainer_type: tinker`` and the ``model.tinker`` section (the Tinker
  service) fail naming the key and what to write instead, never read as a built-in part.
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

COLOCATE = "colocate"
MODES = "both, train, explore, bench, serve"


def upstream_spellings(data: Any) -> Any:
    """``data`` (a config as plain data) with Trinity-RFT's spellings turned into ours;
    anything but a mapping is returned as is, for the build to refuse."""
    if not isinstance(data, Mapping):
        return data
    out = copy.deepcopy(dict(data))
    colocate_spelling(out)
    sections = [("", out)]
    stages = out.get("stages")
    stages = stages if isinstance(stages, list) else []
    for index, stage in enumerate(stages):
        if isinstance(stage, dict):
            sections.append((f"stages[{index}].", stage))
    for prefix, section in sections:
        _parts_not_here(prefix, section)
        for path, _, storage in storage_mappings(section.get("buffer"), f"{prefix}buffer"):
            _selector_section(path, storage)
    _runner_num(out.get("explorer"), None)
    for stage in stages:
        if isinstance(stage, dict):
            _runner_num(stage.get("explorer"), out.get("explorer"))
    return out


_TINKER = "the Tinker service (LoRA training and sampling through Tinker's API)"
_ENGINES = "use transformers, the built-in engine (vllm and vllm_async name it too)"
# (section, key, value) -> (what it is upstream, what to write instead)
NOT_HERE = {
    ("synchronizer", "sync_method", "hccl"): (
        "is Trinity-RFT's weight sync over Huawei Ascend NPUs (HCCL); this project runs on "
        "CUDA GPUs or the CPU",
        "use nccl (gloo without CUDA), memory or checkpoint",
    ),
    ("rollout_model", "engine_type", "sglang"): (
        "is the SGLang inference engine, which is not built in here",
        _ENGINES,
    ),
    ("rollout_model", "engine_type", "tinker"): (
        f"is the engine of {_TINKER}, which this project does not talk to",
        _ENGINES,
    ),
    ("trainer", "trainer_type", "tinker"): (
        f"is the trainer of {_TINKER}, which this project does not talk to",
        "use torch, the built-in trainer (verl names it too)",
    ),
}


def _parts_not_here(prefix: str, section: Mapping[str, Any]) -> None:
    """Refuse what names a part upstream has and this project does not (see NOT_HERE)."""
    places: list[tuple[str, str, Any]] = [
        (f"{prefix}synchronizer", "synchronizer", section.get("synchronizer")),
        (f"{prefix}trainer", "trainer", section.get("trainer")),
    ]
    explorer = section.get("explorer")
    if isinstance(explorer, Mapping):
        places.append(
            (f"{prefix}explorer.rollout_model", "rollout_model", explorer.get("rollout_model"))
        )
        auxiliary = explorer.get("auxiliary_models")
        for i, model in enumerate(auxiliary if isinstance(auxiliary, list) else []):
            places.append((f"{prefix}explorer.auxiliary_models[{i}]", "rollout_model", model))
    for path, kind, part in places:
        if not isinstance(part, Mapping):
            continue
        for (owner, key, value), (problem, valid) in NOT_HERE.items():
            if owner == kind and part.get(key) == value:
                raise ConfigError(f"{path}.{key}", problem, value=value, valid=valid)
    model = section.get("model")
    if isinstance(model, Mapping) and "tinker" in model:
        raise ConfigError(
            f"{prefix}model.tinker",
            f"is the section of {_TINKER} (enable: true switches engine and trainer to it), "
            "which this project does not talk to",
            value=model["tinker"],
            valid="remove model.tinker: the built-in engine and trainer train LoRA adapters from "
            "model.lora_configs",
        )


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


def storage_mappings(buffer: Any, path: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Every taskset and buffer mapping of a ``buffer`` section at ``path``: its key path,
    its key as ``docs/config.md`` writes it (``buffer.explorer_input.tasksets[]``), itself."""
    if not isinstance(buffer, Mapping):
        return
    inputs = "buffer.explorer_input"
    explorer_input = buffer.get("explorer_input")
    if isinstance(explorer_input, Mapping):
        taskset = explorer_input.get("taskset")
        if isinstance(taskset, dict):
            yield f"{path}.explorer_input.taskset", f"{inputs}.taskset", taskset
        for key in ("tasksets", "eval_tasksets"):
            items = explorer_input.get(key)
            for i, item in enumerate(items if isinstance(items, list) else []):
                if isinstance(item, dict):
                    yield f"{path}.explorer_input.{key}[{i}]", f"{inputs}.{key}[]", item
    inputs = "buffer.trainer_input"
    trainer_input = buffer.get("trainer_input")
    if isinstance(trainer_input, Mapping):
        experience = trainer_input.get("experience_buffer")
        if isinstance(experience, dict):
            yield (
                f"{path}.trainer_input.experience_buffer",
                f"{inputs}.experience_buffer",
                experience,
            )
        auxiliary = trainer_input.get("auxiliary_buffers")
        for name, item in (auxiliary if isinstance(auxiliary, Mapping) else {}).items():
            if isinstance(item, dict):
                where = f"{path}.trainer_input.auxiliary_buffers.{name}"
                yield where, f"{inputs}.auxiliary_buffers.<name>", item


def colocate_spelling(data: dict[str, Any]) -> None:
    """Turn ``mode: colocate`` in ``data`` (a config as plain data, changed in place)
    into mode both with ``cluster.colocate`` true; a stage may say colocate only in a
    colocated run (its mode is then both)."""
    colocated = data.get("mode") == COLOCATE
    if colocated:
        data["mode"] = "both"
        cluster = data.get("cluster")
        cluster = dict(cluster) if isinstance(cluster, dict) else {}
        cluster["colocate"] = True
        cluster.setdefault("gpu_per_node", 1)
        data["cluster"] = cluster
    stages = data.get("stages")
    for index, stage in enumerate(stages if isinstance(stages, list) else []):
        if not isinstance(stage, dict) or stage.get("mode") != COLOCATE:
            continue
        if not colocated:
            raise ConfigError(
                f"stages[{index}].mode",
                "colocate places the whole run on one GPU: write mode: colocate at the top "
                "level (its stages then run mode both)",
                value=COLOCATE,
                valid=MODES,
            )
        stage["mode"] = "both"
