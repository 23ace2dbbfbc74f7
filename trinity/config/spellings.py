"""Trinity-RFT spellings the typed schema cannot take as written, read before the build.

- ``task_selector`` as a section (v0.6's spelling: ``selector_type``, ``seed``,
  ``feature_keys``, ``kwargs``) is the ``data_selector`` section here, where
  ``task_selector`` is the plain order name; a storage giving both sections fails.
- ``synchronizer.sync_style: fully_async`` is no sync style upstream either: fully
  asynchronous RFT there is two runs; the error says what to write instead.

``upstream_spellings`` returns new data and leaves the mapping it reads unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from trinity.config.errors import ConfigError

FULLY_ASYNC = (
    "is not a sync style: fully asynchronous RFT is two runs, one with mode: explore and one "
    "with mode: train, sharing buffer.trainer_input.experience_buffer and exchanging weights "
    "through checkpoints (sync_method: checkpoint); within one run of mode both, "
    "explorer_driven lets the explorer go on without waiting for the trainer"
)


def upstream_spellings(data: Any) -> Any:
    """``data`` (a config as plain data) with Trinity-RFT's spellings turned into ours;
    anything but a mapping is returned as is, for the build to refuse."""
    if not isinstance(data, Mapping):
        return data
    out = copy.deepcopy(dict(data))
    sections = [("", out)]
    for index, stage in enumerate(out.get("stages") or []):
        if isinstance(stage, dict):
            sections.append((f"stages[{index}].", stage))
    for prefix, section in sections:
        sync = section.get("synchronizer")
        if isinstance(sync, Mapping) and sync.get("sync_style") == "fully_async":
            raise ConfigError(
                f"{prefix}synchronizer.sync_style",
                FULLY_ASYNC,
                value="fully_async",
                valid="fixed, explorer_driven or trainer_driven",
            )
        for path, storage in _storages(section.get("buffer"), f"{prefix}buffer"):
            _selector_section(path, storage)
    return out


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
            for i, item in enumerate(explorer_input.get(key) or []):
                if isinstance(item, dict):
                    yield f"{path}.explorer_input.{key}[{i}]", item
    trainer_input = buffer.get("trainer_input")
    if isinstance(trainer_input, Mapping):
        experience = trainer_input.get("experience_buffer")
        if isinstance(experience, dict):
            yield f"{path}.trainer_input.experience_buffer", experience
        for name, item in (trainer_input.get("auxiliary_buffers") or {}).items():
            if isinstance(item, dict):
                yield f"{path}.trainer_input.auxiliary_buffers.{name}", item
