"""The one exception of the config system: what is wrong, where, and what would be valid."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

_NOTHING = object()  # "no value given", distinct from a given None


def format_value(value: Any, limit: int = 80) -> str:
    """A short single-line rendering of a config value for messages."""
    try:
        text = repr(value) if isinstance(value, str) else str(value)
    except ValueError:  # an int past Python's limit of digits for str(), maybe inside a list
        text = f"<{type(value).__name__} too large to print>"
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest to ``name`` by spelling, if any is close."""
    found = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


class ConfigError(Exception):
    """A config value is missing, mistyped, out of range or inconsistent with another.

    Attributes:
        path: full dotted key path, list items as ``eval_tasksets[0].name`` ("" for the root).
        value: the offending value (``None`` when nothing was given).
        valid: what would be valid, in words.
        suggestion: the nearest valid name for a misspelt key or choice, if any.

    ``str(err)`` is one line: ``<path>: <problem> (given: <value>); <valid>; did you mean 'x'?``
    """

    def __init__(
        self,
        path: str,
        problem: str,
        *,
        value: Any = _NOTHING,
        valid: str = "",
        suggestion: str | None = None,
    ) -> None:
        self.path = path
        self.problem = problem
        self.value = None if value is _NOTHING else value
        self.has_value = value is not _NOTHING
        self.valid = valid
        self.suggestion = suggestion
        super().__init__(self._message())

    def _message(self) -> str:
        text = f"{self.path or '<root>'}: {self.problem}"
        if self.has_value:
            text += f" (given: {format_value(self.value)})"
        if self.valid and self.valid not in self.problem:
            text += f"; {self.valid}"
        if self.suggestion:
            text += f"; did you mean '{self.suggestion}'?"
        return text.replace("\r", " ").replace("\n", " ")  # one line, whatever the parts held

    def __str__(self) -> str:
        return self._message()

    def within(self, context: str, *, path: str | None = None) -> ConfigError:
        """The same error, saying where it arose (e.g. ``stage 'sft_warmup'``), optionally re-pathed."""
        value = self.value if self.has_value else _NOTHING
        return ConfigError(
            self.path if path is None else path,
            f"{self.problem} (in {context})",
            value=value,
            valid=self.valid,
            suggestion=self.suggestion,
        )
