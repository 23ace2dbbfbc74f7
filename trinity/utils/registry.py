"""One small name -> object registry, used for every pluggable part.

A registry maps the names the config uses (``advantage_fn: grpo``,
``default_workflow_type: math_workflow``) to classes or functions. A name that is not
registered but looks like a dotted import path (``my_pkg.module.MyWorkflow``) is
imported, so user code works without a plugin directory too.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """Raised when a registry has no entry for a name."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


class Registry(Generic[T]):
    """Maps names to objects; ``register`` is a decorator."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} '{name}' is already registered")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        if name in self._items:
            return self._items[name]
        if "." in name:
            module_name, _, attr = name.rpartition(".")
            try:
                return getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                raise UnknownNameError(f"cannot import {self.kind} '{name}': {exc}") from exc
        raise UnknownNameError(self.unknown_message(name))

    def unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"unknown {self.kind} '{name}' (valid: {', '.join(self.names())}){hint}"

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: Any) -> bool:
        return name in self._items
