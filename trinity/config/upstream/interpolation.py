"""Trinity-RFT's interpolations (``${algorithm.repeat_times}``) of keys the file leaves out.

Trinity-RFT reads a config file over its schema's defaults, so an interpolation may name
any key of the schema, written in the file or not (its example configs refer to veRL
defaults such as ``${trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs}``).
OmegaConf alone only sees the file. ``fill_referenced_defaults`` writes the schema's
default of each such key into the raw data before OmegaConf resolves it, and returns
where it wrote, so the loader takes those defaults out again: the config keeps only what
the file wrote. A key the schema does not have, or one whose default is derived when the
config is resolved (``None``), fails on one line naming it.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Iterator
from typing import Any, Union

from trinity.config.errors import ConfigError
from trinity.config.typed_yaml import field_types, join, to_plain

# ${a.b[0].c}: an absolute key (no resolver, not relative), not escaped as \${...}
_REFERENCE = re.compile(r"(?<!\\)\$\{\s*([A-Za-z_][\w-]*(?:\.[\w-]+|\[\d+\])*)\s*\}")
_SEGMENT = re.compile(r"[^.\[\]]+|\[\d+\]")

Segment = str | int
_ABSENT = object()


def fill_referenced_defaults(
    raw: dict[str, Any], schema: type
) -> list[tuple[list[Segment], Segment]]:
    """Write into ``raw`` (unresolved plain data of a file) the ``schema`` default of each
    key an interpolation names and ``raw`` lacks; ``(parents, key)`` of each node written,
    for the caller to delete from the resolved data.

    Raises:
        ConfigError: at the key holding the interpolation, when the named key is not in
            ``schema`` or has no fixed default.
    """
    added: list[tuple[list[Segment], Segment]] = []
    for where, text in list(_strings(raw, [])):  # the loop writes into raw
        for match in _REFERENCE.finditer(text):
            ref = match.group(1)
            segments = _segments(ref)
            if _lookup(raw, segments) is not _ABSENT:
                continue
            default = _schema_default(schema, segments, ref, where)
            node = _insert(raw, segments, default, ref, where)
            if not any(node[: len(done)] == done for done in (p + [k] for p, k in added)):
                added.append((node[:-1], node[-1]))
    return added


def _strings(data: Any, path: list[Segment]) -> Iterator[tuple[str, str]]:
    """``(dotted path, text)`` of every string in ``data`` that holds ``${``."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _strings(value, [*path, str(key)])
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _strings(value, [*path, index])
    elif isinstance(data, str) and "${" in data:
        yield _dotted(path), data


def _dotted(segments: list[Segment]) -> str:
    text = ""
    for segment in segments:
        text = join(text, segment)
    return text


def _segments(ref: str) -> list[Segment]:
    found: list[Segment] = []
    for part in _SEGMENT.findall(ref):
        found.append(int(part[1:-1]) if part.startswith("[") else part)
    return found


def _lookup(data: Any, segments: list[Segment]) -> Any:
    for segment in segments:
        if isinstance(data, dict) and str(segment) in data:
            data = data[str(segment)]
        elif isinstance(data, list) and _index(segment) is not None and _index(segment) < len(data):
            data = data[_index(segment)]
        else:
            return _ABSENT
    return data


def _index(segment: Segment) -> int | None:
    if isinstance(segment, int):
        return segment
    return int(segment) if segment.isdigit() else None


def _schema_default(schema: type, segments: list[Segment], ref: str, where: str) -> Any:
    tp: Any = schema
    field: dataclasses.Field | None = None
    for segment in segments:
        tp = _unwrap(tp)
        origin = typing.get_origin(tp)
        if dataclasses.is_dataclass(tp) and isinstance(segment, str) and segment in field_types(tp):
            field = next(f for f in dataclasses.fields(tp) if f.name == segment)
            tp = field_types(tp)[segment]
        elif origin is list and _index(segment) is not None:
            field, tp = None, typing.get_args(tp)[0]
        elif origin is dict and isinstance(segment, str):
            field, tp = None, typing.get_args(tp)[1]
        else:
            raise ConfigError(
                where,
                f"cannot resolve interpolation ${{{ref}}}: {ref} is not a key here",
                valid="a key of this config (docs/config.md), or ${oc.env:VAR}",
            )
    default = _default(field)
    if default is None:
        raise ConfigError(
            where,
            f"cannot resolve interpolation ${{{ref}}}: {ref} is not in the file and has no "
            "fixed default (it is derived when the config is resolved)",
            valid=f"write {ref} in the file",
        )
    return default


def _unwrap(tp: Any) -> Any:
    """The one non-null type of ``X | None``; any other type as is."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) == 1:
            return inner[0]
    return tp


def _default(field: dataclasses.Field | None) -> Any:
    if field is None:
        return None
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return to_plain(field.default_factory())  # type: ignore[misc]
    return None


def _insert(
    raw: dict[str, Any], segments: list[Segment], value: Any, ref: str, where: str
) -> list[Segment]:
    """Write ``value`` at ``segments``, creating mappings on the way; the path (dict keys
    and list indexes) of the topmost node created."""
    data: Any = raw
    path: list[Segment] = []
    for depth, segment in enumerate(segments):
        index = _index(segment)
        if isinstance(data, dict) and str(segment) in data:
            path.append(str(segment))
            data = data[str(segment)]
        elif isinstance(data, list) and index is not None and index < len(data):
            path.append(index)
            data = data[index]
        elif isinstance(data, dict) and all(isinstance(s, str) for s in segments[depth:]):
            *inner, leaf = segments[depth:]
            holder = data
            for name in inner:
                holder[name] = {}
                holder = holder[name]
            holder[leaf] = value
            return [*path, str(segment)]
        else:
            raise _no_item(ref, where)
    return path  # not reached: the key was looked up as absent first


def _no_item(ref: str, where: str) -> ConfigError:
    return ConfigError(
        where,
        f"cannot resolve interpolation ${{{ref}}}: the file has no {ref}, and a list item or "
        "a null section on its way cannot be filled with defaults",
        valid=f"write {ref} in the file",
    )
