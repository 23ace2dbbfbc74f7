"""Experiences in a JSON-lines file: one experience per line, no pickle.

The line format is ``trinity.buffer.codec.experience_to_dict`` (tensors as
``{"dtype", "shape", "data"}``). Used as the ``file`` experience buffer in explore
mode and as a queue backup. Each ``write`` appends whole lines, flushes and fsyncs;
the reader only consumes lines that end in a newline, so a batch cut short by a
crash is never half-read.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from typing import Any

from trinity.buffer.codec import experience_from_dict, experience_to_dict
from trinity.buffer.errors import MalformedRowError
from trinity.types import Experience


class JsonlWriter:
    """Appends experiences to ``path`` (parent directories are created)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, exps: Iterable[Experience]) -> None:
        # encode everything first so an unstorable experience writes nothing
        text = "".join(json.dumps(experience_to_dict(exp)) + "\n" for exp in exps)
        if not text:
            return
        with self._lock:
            self._file.write(text)
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class JsonlReader:
    """Reads experiences from ``path`` with a resumable cursor (byte offset + line number)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._offset = 0  # byte offset of the first unread line
        self._line = 0  # number of lines consumed so far
        self._lock = threading.Lock()

    def read_new(self, n: int) -> list[Experience]:
        """Up to ``n`` complete lines written after the last ones this reader returned."""
        with self._lock:
            if not os.path.exists(self.path):
                return []
            out: list[Experience] = []
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                while len(out) < n:
                    raw = f.readline()
                    if not raw.endswith(b"\n"):
                        break  # end of file, or a line still being written
                    self._offset += len(raw)
                    self._line += 1
                    if raw.strip():
                        out.append(self._decode(raw, self._line))
            return out

    def read_all(self) -> list[Experience]:
        """Every complete line of the file, independent of the cursor."""
        out: list[Experience] = []
        if not os.path.exists(self.path):
            return out
        with open(self.path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                if raw.endswith(b"\n") and raw.strip():
                    out.append(self._decode(raw, number))
        return out

    def _decode(self, raw: bytes, line: int) -> Experience:
        try:
            return experience_from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise MalformedRowError(
                f"{self.path}, line {line}: not a stored experience ({exc})"
            ) from exc

    def state_dict(self) -> dict[str, Any]:
        return {"offset": self._offset, "line": self._line}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._offset = int(state["offset"])
        self._line = int(state["line"])
