"""Strict conversion between plain YAML data (dicts, lists, scalars) and the typed schema
dataclasses.

Not pydantic: it refuses what YAML and veRL files write (``"1e3"`` for an int, ``5`` for a
str, ``None`` for unset), its errors name neither valid keys nor the nearest one, and it
needs ``extra="forbid"`` on all 45 schema dataclasses and 0.5 s to build (measured).

Every key must be a field of its section, every value must fit the field's type. Strings
that spell a number are accepted for numeric fields: YAML 1.1 reads ``1e-5`` as a string
and ``${oc.env:VAR}`` always yields one. Errors name the full key path.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union

from trinity.config.errors import ConfigError, closest

T = TypeVar("T")

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}
_NULL = {"none", "null", "~"}


def join(path: str, key: str | int) -> str:
    """Extend a dotted key path: ``join("a", "b") == "a.b"``, ``join("a", 0) == "a[0]"``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """Field name -> resolved type annotation of a schema dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def describe(tp: Any) -> str:
    """What a value of type ``tp`` looks like, in words."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        parts = [describe(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return "one of: " + ", ".join(str(a) for a in args)
    if origin is list:
        return f"a list of {describe(args[0])}" if args else "a list"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping with keys: " + ", ".join(field_types(tp))
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        tp, "any value"
    )


def build(cls: type[T], data: Any, path: str = "") -> T:
    """Build the dataclass ``cls`` from a mapping, checking every key and value.

    Raises:
        ConfigError: unknown key (with the nearest valid one), wrong type or bad choice.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(path, "must be a mapping", value=data, valid=describe(cls))
    types_ = field_types(cls)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in types_:
            where = f"valid keys of {path}" if path else "valid top-level keys"
            raise ConfigError(
                join(path, str(key)),
                "unknown key",
                value=value,
                valid=f"{where}: {', '.join(types_)}",
                suggestion=closest(str(key), types_),
            )
        values[key] = convert(value, types_[key], join(path, key))
    return cls(**values)


def convert(value: Any, tp: Any, path: str) -> Any:
    """Check ``value`` against the annotation ``tp`` and return it in the schema's form."""
    if tp is Any:
        return copy.deepcopy(value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return _convert_optional(value, tp, args, path)
    if dataclasses.is_dataclass(tp):
        return build(tp, {} if value is None else value, path)  # an empty section: defaults
    if value is None:
        raise ConfigError(
            path, f"must be {describe(tp)}, not null", value=value, valid=describe(tp)
        )
    if origin is Literal:
        if value in args:
            return value
        choices = [str(a) for a in args]
        raise ConfigError(
            path,
            "is not a valid choice",
            value=value,
            valid="valid: " + ", ".join(choices),
            suggestion=closest(str(value), choices),
        )
    if origin is list:
        if isinstance(value, (list, tuple)):
            return [convert(v, args[0], join(path, i)) for i, v in enumerate(value)]
        raise ConfigError(path, f"must be {describe(tp)}", value=value, valid=describe(tp))
    if origin is dict:
        if isinstance(value, Mapping):
            return {str(k): convert(v, args[1], join(path, str(k))) for k, v in value.items()}
        raise ConfigError(path, "must be a mapping", value=value, valid=describe(tp))
    if tp in (bool, int, float, str):
        return _convert_scalar(value, tp, path)
    raise TypeError(f"schema type {tp!r} at {path} is not supported by the converter")


def _convert_optional(value: Any, tp: Any, args: tuple[Any, ...], path: str) -> Any:
    allowed = [a for a in args if a is not type(None)]
    if len(allowed) != 1:
        raise TypeError(f"schema type {tp!r} at {path}: only 'X | None' unions are supported")
    if value is None:
        return None
    # veRL files write `None` (a string in YAML) for "unset"; only str fields keep it as text
    if isinstance(value, str) and value.strip().lower() in _NULL and allowed[0] is not str:
        return None
    return convert(value, allowed[0], path)


def _convert_scalar(value: Any, tp: type, path: str) -> Any:
    wrong = ConfigError(path, f"must be {describe(tp)}", value=value, valid=describe(tp))
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise wrong
    if isinstance(value, bool) or isinstance(value, (list, dict, Mapping)):
        raise wrong
    if tp is str:
        if isinstance(value, (str, int, float)):
            return str(value)
        raise wrong
    if isinstance(value, str):
        text = value.strip()
        if _INT.fullmatch(text):
            value = int(text)
        elif _FLOAT.fullmatch(text):
            value = float(text)
        else:
            raise wrong
    if tp is float and isinstance(value, (int, float)):
        return float(value)
    if tp is int:
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    raise wrong


def to_plain(obj: Any) -> Any:
    """Plain dicts/lists/scalars of a config dataclass (the inverse of ``build``)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return copy.deepcopy(obj)
