"""Building a part's ``Args`` dataclass from the config's ``*_args`` mapping.

``build_args`` turns the YAML mapping (``policy_loss_fn_args``, ...) into the part's
dataclass and refuses names or types it does not know, so a typo such as
``clip_rnage`` fails at start-up instead of silently using the default.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class InvalidArgsError(ValueError):
    """An ``*_args`` mapping names an unknown argument or gives a value of the wrong type."""


def _accepts(annotation: Any, value: Any) -> bool:
    """Whether ``value`` fits a simple annotation (bool, int, float, str, optional, literal)."""
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(arg, value) for arg in typing.get_args(annotation))
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if annotation is type(None):
        return value is None
    if annotation is float:
        # YAML writes 1 for 1.0; bool is an int subclass but never a sensible float
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("NoneType", "None")


def build_args(args_cls: type[T], given: Mapping[str, Any] | None, owner: str) -> T:
    """Build ``args_cls`` from a config mapping; ``owner`` names the part in errors.

    Raises:
        InvalidArgsError: an unknown name (listing the valid ones) or a mistyped value.
    """
    given = dict(given or {})
    fields = {f.name: f for f in dataclasses.fields(args_cls)}  # type: ignore[arg-type]
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise InvalidArgsError(
            f"{owner} got unknown argument(s) {', '.join(map(repr, unknown))}; "
            f"valid arguments: {', '.join(fields) or '(none)'}"
        )
    hints = typing.get_type_hints(args_cls)
    values: dict[str, Any] = {}
    for name, value in given.items():
        if not _accepts(hints[name], value):
            raise InvalidArgsError(
                f"{owner} argument {name!r} must be {_type_name(hints[name])}, got {value!r}"
            )
        values[name] = float(value) if hints[name] is float else value
    try:
        return args_cls(**values)
    except ValueError as exc:  # __post_init__ range checks
        raise InvalidArgsError(f"{owner}: {exc}") from exc
