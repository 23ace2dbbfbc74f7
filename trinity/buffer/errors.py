"""Exceptions raised by the buffer: each names what was looked for and where."""

from __future__ import annotations


class DatasetNotFoundError(FileNotFoundError):
    """No data file exists for the requested path, subset and split."""


class MalformedRowError(ValueError):
    """A data file holds a row that cannot be parsed (bad JSON, not an object)."""


class MissingKeyError(KeyError):
    """A row lacks a key the format names (e.g. ``format.prompt_key``)."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


class TasksetExhausted(Exception):
    """The taskset has delivered every batch of its total epochs or steps.

    Not a ``StopIteration``: that one turns into ``RuntimeError`` when it escapes a
    generator or coroutine (PEP 479), and readers are called from both.
    """


class QueueClosed(Exception):
    """The experience queue was closed and holds nothing more to read."""


class ExperienceCodecError(TypeError):
    """An experience field cannot be stored without pickle (e.g. a tensor in ``info``)."""
