"""Keys of the other kind of storage on a taskset or a buffer: taken out, checked, reported.

Trinity-RFT has one storage type for tasksets and buffers, so its configs may set a queue
setting on a taskset (``use_priority_queue``, ``capacity``) or a task setting on the
experience buffer (``workflow_args``). Here a taskset is a ``TasksetConfig`` and a buffer
an ``ExperienceBufferConfig``: before the build, ``take_other_kind_keys`` takes the keys of
the other type out of each storage mapping (stage overrides included) and checks their
values against that type; ``keep_other_kind_keys`` records them on the built config, and
``set_without_effect`` lists those set to a non-default value with the reason
``OTHER_KIND`` gives. A key of neither type stays in the mapping, for the build to refuse
as unknown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trinity.config.schema import Config, ExperienceBufferConfig, StorageConfig, TasksetConfig
from trinity.config.typed_yaml import build, to_plain
from trinity.config.upstream.spellings import storage_mappings

_SHARED = frozenset(f.name for f in dataclasses.fields(StorageConfig))
# kind -> its own top-level keys, in field order
OWN_KEYS: dict[type, tuple[str, ...]] = {
    kind: tuple(f.name for f in dataclasses.fields(kind) if f.name not in _SHARED)
    for kind in (TasksetConfig, ExperienceBufferConfig)
}

TASKSETS = (
    "buffer.explorer_input.taskset",
    "buffer.explorer_input.tasksets[]",
    "buffer.explorer_input.eval_tasksets[]",
)
EXPERIENCE_BUFFER = "buffer.trainer_input.experience_buffer"
AUXILIARY_BUFFERS = "buffer.trainer_input.auxiliary_buffers.<name>"

_PRIORITY = "a taskset is read in its selector's order; priority is for queues"
_WHOLE_DATA = (
    "queue-only: a taskset (file or sql) holds all its rows from the start, so no read waits "
    "or overflows"
)
_TASKSET_WHY = {
    "max_read_timeout": _WHOLE_DATA,
    "use_priority_queue": _PRIORITY,
    "reuse_cooldown_time": _PRIORITY,
    "replay_buffer": _PRIORITY,
    "capacity": _WHOLE_DATA,
    "total_epochs": "only auxiliary buffers; tasksets pass buffer.total_epochs times",
}
_READS_NO_TASKS = {
    EXPERIENCE_BUFFER: "a task setting: the trainer reads experiences, never tasks",
    AUXILIARY_BUFFERS: "a task setting: an auxiliary buffer holds SFT rows, never tasks",
}
# "<storage as docs/config.md writes it>.<key of the other kind>" -> why it has no effect
OTHER_KIND: dict[str, str] = {
    **{f"{taskset}.{key}": why for taskset in TASKSETS for key, why in _TASKSET_WHY.items()},
    **{
        f"{buffer}.{key}": why
        for buffer, why in _READS_NO_TASKS.items()
        for key in OWN_KEYS[TasksetConfig]
    },
}

_RECORD = "_other_kind_keys"  # an attribute, not a field: the YAML and to_plain leave it out


@dataclass(frozen=True)
class CarriedKeys:
    """The keys of the other kind taken out of one storage mapping, checked."""

    where: str  # the storage's path in the config: stages[0].buffer.explorer_input.tasksets[1]
    pattern: str  # as docs/config.md writes it: buffer.explorer_input.tasksets[]
    kind: type  # the type they belong to
    values: dict[str, Any]  # plain values, in the kind's field order


def take_other_kind_keys(data: Any) -> list[CarriedKeys]:
    """Take the keys of the other kind out of every storage of ``data`` (a config as plain
    data, changed in place), the run's and each stage's.

    Raises:
        ConfigError: a value that does not fit the type of its key, named by its path.
    """
    if not isinstance(data, Mapping):
        return []
    sections: list[tuple[str, Any]] = [("", data)]
    stages = data.get("stages")
    for index, stage in enumerate(stages if isinstance(stages, list) else []):
        if isinstance(stage, Mapping):
            sections.append((f"stages[{index}].", stage))
    carried = []
    for prefix, section in sections:
        for where, pattern, storage in storage_mappings(section.get("buffer"), f"{prefix}buffer"):
            taken = _take(where, pattern, storage)
            if taken is not None:
                carried.append(taken)
    return carried


def _take(where: str, pattern: str, storage: dict[str, Any]) -> CarriedKeys | None:
    own = TasksetConfig if pattern in TASKSETS else ExperienceBufferConfig
    other = ExperienceBufferConfig if own is TasksetConfig else TasksetConfig
    taken = {key: storage.pop(key) for key in OWN_KEYS[other] if key in storage}
    if not taken:
        return None
    checked = to_plain(build(other, taken, where))
    values = {key: checked[key] for key in OWN_KEYS[other] if key in taken}
    return CarriedKeys(where, pattern, other, values)


def keep_other_kind_keys(cfg: Config, carried: list[CarriedKeys]) -> None:
    setattr(cfg, _RECORD, carried)


def carried_keys(cfg: Config) -> list[CarriedKeys]:
    """The keys of the other kind the config was written with (``take_other_kind_keys``)."""
    return getattr(cfg, _RECORD, [])


def other_kind_reason(pattern: str, key: str) -> str:
    """Why ``key`` (dotted, under the storage ``pattern``) has no effect there."""
    return OTHER_KIND[f"{pattern}.{key.split('.')[0]}"]
