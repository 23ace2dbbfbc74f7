"""Build the experience buffer a storage config describes.

``make_experience_buffer(cfg)`` returns an object with ``put(exps)``,
``get(n, timeout=None)`` and ``close()``, chosen by ``cfg.storage_type``:

==========  ===================================================================
queue       ``ExperienceQueue`` (FIFO, ``capacity``), or ``PriorityExperienceQueue``
            with ``use_priority_queue`` (``reuse_cooldown_time``) or ``replay_buffer.enable``
            (its ``reuse_cooldown_time``; ``priority_fn`` ``linear_decay``: ``decay``
            weighs the reads; ``decay_limit_randomization``: also ``use_count_limit``
            and ``sigma``, see ``priority_queue``); ``path``, when set, is the backup
            (SQLite/URL, or ``.jsonl``)
sql         ``path`` is a SQLite file or SQLAlchemy URL (PostgreSQL works, with
            ``connect_timeout`` and ``lock_timeout``); the reader polls for new rows
file        JSON lines at ``path`` (a ``.jsonl`` file, or a directory holding
            ``experiences.jsonl``); for explore mode and debugging
==========  ===================================================================

``get`` without a timeout waits at most ``cfg.max_read_timeout`` seconds and then
returns the incomplete batch. ``skip_invalid_rows`` makes the sql/file readers skip
(and count in ``.invalid``) rows they cannot decode instead of raising.
``auxiliary_buffers`` are built the same way by ``make_auxiliary_buffers``.

The sql and file buffers and a priority queue with a backup keep a read position
(``state_dict``/``load_state_dict``) that a resumed run restores, and
``discard_stored(step)`` skips what an interrupted run stored for later explore steps
(``trinity.launch.buffer_actor``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from trinity.buffer.priority_queue import PriorityExperienceQueue
from trinity.buffer.queue import ExperienceQueue, open_backup
from trinity.buffer.storage_buffer import jsonl_buffer, sql_buffer
from trinity.config.schema.buffer import CONNECT_TIMEOUT, LOCK_TIMEOUT, PRIORITY_FN_ARGS
from trinity.types import Experience

EXPERIENCE_STORAGE_TYPES = ("queue", "sql", "file")


class ExperienceBuffer(Protocol):
    """What the explorer writes to and the trainer reads from."""

    def put(self, exps: list[Experience]) -> None: ...

    def get(self, n: int, timeout: float | None = None) -> list[Experience]: ...

    def close(self) -> None: ...


class ExperienceBufferConfigError(ValueError):
    """A storage config cannot describe an experience buffer."""


def _priority_fn_options(name: str, priority_fn: str, given: Any) -> dict[str, Any]:
    """``PriorityExperienceQueue`` keywords of a ``replay_buffer.priority_fn`` and its args."""
    if priority_fn not in PRIORITY_FN_ARGS:
        raise ExperienceBufferConfigError(
            f"experience buffer '{name}': replay_buffer.priority_fn '{priority_fn}' is unknown; "
            f"valid: {', '.join(PRIORITY_FN_ARGS)}"
        )
    args = {**PRIORITY_FN_ARGS[priority_fn], **(given or {})}
    return {
        "use_count_weight": float(args["decay"]),
        "use_count_limit": int(args.get("use_count_limit", 0)),
        "priority_sigma": float(args.get("sigma", 0.0)),
    }


def make_experience_buffer(storage_cfg: Any) -> ExperienceBuffer:
    """The buffer ``storage_cfg`` (a ``StorageConfig`` or anything with its fields) names."""
    name = getattr(storage_cfg, "name", "") or "experience_buffer"
    storage_type = getattr(storage_cfg, "storage_type", None) or "queue"
    storage_type = getattr(storage_type, "value", storage_type)  # enums carry it in .value
    path = getattr(storage_cfg, "path", None)
    read_timeout = getattr(storage_cfg, "max_read_timeout", None)
    skip_invalid = bool(getattr(storage_cfg, "skip_invalid_rows", False))
    timeouts = {
        "connect_timeout": getattr(storage_cfg, "connect_timeout", CONNECT_TIMEOUT),
        "lock_timeout": getattr(storage_cfg, "lock_timeout", LOCK_TIMEOUT),
    }
    if storage_type == "queue":
        capacity = getattr(storage_cfg, "capacity", None) or 10000
        backup = open_backup(path, **timeouts) if path else None
        replay = getattr(storage_cfg, "replay_buffer", None)
        if replay is not None and getattr(replay, "enable", False):
            cooldown = replay.reuse_cooldown_time
            if cooldown is None:
                cooldown = getattr(storage_cfg, "reuse_cooldown_time", None)
            return PriorityExperienceQueue(
                capacity,
                backup,
                reuse_cooldown_time=cooldown,
                read_timeout=read_timeout,
                **_priority_fn_options(name, replay.priority_fn, replay.priority_fn_args),
            )
        if getattr(storage_cfg, "use_priority_queue", False):
            return PriorityExperienceQueue(
                capacity,
                backup,
                reuse_cooldown_time=getattr(storage_cfg, "reuse_cooldown_time", None),
                read_timeout=read_timeout,
            )
        return ExperienceQueue(capacity, backup, read_timeout=read_timeout)
    if storage_type in ("sql", "file") and not path:
        raise ExperienceBufferConfigError(
            f"experience buffer '{name}': storage_type '{storage_type}' needs a path "
            + (
                "(a SQLite file or SQLAlchemy URL)"
                if storage_type == "sql"
                else "(a .jsonl file or a directory)"
            )
        )
    if storage_type == "sql":
        return sql_buffer(path, read_timeout, skip_invalid=skip_invalid, **timeouts)
    if storage_type == "file":
        return jsonl_buffer(path, read_timeout, skip_invalid=skip_invalid)
    raise ExperienceBufferConfigError(
        f"experience buffer '{name}': unknown storage_type '{storage_type}' "
        f"(valid: {', '.join(EXPERIENCE_STORAGE_TYPES)})"
    )


def make_auxiliary_buffers(configs: Mapping[str, Any]) -> dict[str, ExperienceBuffer]:
    """``trainer_input.auxiliary_buffers``: one buffer per name, built like the main one."""
    buffers: dict[str, ExperienceBuffer] = {}
    try:
        for key, cfg in configs.items():
            buffers[key] = make_experience_buffer(cfg)
    except Exception:
        for buffer in buffers.values():  # do not leak the ones already opened
            buffer.close()
        raise
    return buffers
