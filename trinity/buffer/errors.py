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


class InvalidRows:
    """Rows skipped because they were malformed (``skip_invalid_rows: true``).

    Keeps the count and the first ``keep`` messages (file, line, problem) so a summary
    can say what was wrong without holding every message of a bad file.
    """

    def __init__(self, keep: int = 5) -> None:
        self.count = 0
        self.examples: list[str] = []
        self._keep = keep

    def record(self, message: str) -> None:
        self.count += 1
        if len(self.examples) < self._keep:
            self.examples.append(message)

    def summary(self) -> str:
        more = f" (first {len(self.examples)} shown)" if self.count > len(self.examples) else ""
        return f"skipped {self.count} invalid row(s){more}: " + "; ".join(self.examples)


class StorageTimeout(TimeoutError):
    """A database did not answer within a configured timeout (``connect_timeout``,
    ``lock_timeout``); the message names the key and the server."""
