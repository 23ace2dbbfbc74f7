"""Experiences in a JSON-lines file: one experience per line, no pickle.

The line format is ``trinity.buffer.codec.experience_to_dict`` (tensors as
``{"dtype", "shape", "data"}``). Used as the ``file`` experience buffer in explore
mode and as a queue backup. Each ``write`` appends whole lines under an exclusive
``flock`` (so writer processes never interleave), flushes and fsyncs; the reader
reads under a shared ``flock`` (so it never sees a batch that is still being appended)
and only consumes lines that end in a newline, so a line cut short by a crash is never
read. A writer killed inside a write can leave the whole lines of its batch before the
cut: each is a complete experience, so at most the experiences in flight are lost. A
new writer cuts a partial last line off before appending (under the same lock, so it
can only be left by a writer that died), which keeps the lines that follow readable.

A line that is not a stored experience raises MalformedRowError naming the file and
line; with ``skip_invalid=True`` it is skipped and counted in ``invalid`` instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from trinity.buffer.codec import experience_from_dict, experience_to_dict
from trinity.buffer.errors import InvalidRows, MalformedRowError
from trinity.buffer.media_store import MediaDir
from trinity.buffer.superseded import Superseded
from trinity.types import Experience

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def _file_lock(fd: int, mode: int = fcntl.LOCK_EX) -> Iterator[None]:
    fcntl.flock(fd, mode)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


class JsonlWriter:
    """Appends experiences to ``path`` (parent directories are created)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._file = open(self.path, "a+b")  # readable: the partial-line check reads
        self._lock = threading.Lock()
        self.media = MediaDir(self.path)  # images' tensors, once per prompt
        with self._lock, _file_lock(self._file.fileno()):
            self._drop_partial_line()

    def write(self, exps: Iterable[Experience]) -> list[int]:
        """Append ``exps``; returns the byte offset of each one's line."""
        # encode everything first so an unstorable experience writes nothing
        exps = list(exps)
        lines = [(json.dumps(experience_to_dict(exp)) + "\n").encode("utf-8") for exp in exps]
        self.media.put(exps)  # before the lines that name them
        if not lines:
            return []
        with self._lock, _file_lock(self._file.fileno()):
            offsets, end = [], os.fstat(self._file.fileno()).st_size  # appends land there
            for line in lines:
                offsets.append(end)
                end += len(line)
            self._file.write(b"".join(lines))
            self._file.flush()
            os.fsync(self._file.fileno())
        return offsets

    def read_at(self, offsets: Iterable[int]) -> dict[int, Experience]:
        """The experiences of the lines at ``offsets`` (as ``write`` returned them), by
        offset; a line that is not there whole is left out."""
        found = {}
        with open(self.path, "rb") as f:
            for offset in offsets:
                f.seek(offset)
                raw = f.readline()
                if raw.endswith(b"\n"):
                    found[offset] = with_media(json.loads(raw), self.media)
        return found

    def _drop_partial_line(self) -> None:
        fd = self._file.fileno()
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return
        end = size
        while end > 0:  # find the last newline, scanning back in blocks
            start = max(0, end - 65536)
            cut = os.pread(fd, end - start, start).rfind(b"\n")
            if cut >= 0:
                end = start + cut + 1
                break
            end = start
        logger.warning(
            "%s: dropping %d bytes of an incomplete last line (a writer stopped mid-write)",
            self.path,
            size - end,
        )
        os.ftruncate(fd, end)

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

    def __init__(self, path: str | os.PathLike[str], skip_invalid: bool = False) -> None:
        self.path = os.fspath(path)
        self.skip_invalid = skip_invalid
        self.invalid = InvalidRows()  # lines skipped by read_new
        self._offset = 0  # byte offset of the first unread line
        self._line = 0  # number of lines consumed so far
        self._superseded: Superseded | None = None  # lines read_new skips (a resume)
        self._lock = threading.Lock()
        self.media = MediaDir(self.path)

    def read_new(self, n: int) -> list[Experience]:
        """Up to ``n`` complete lines written after the last ones this reader returned."""
        with self._lock:
            if not os.path.exists(self.path):
                return []
            out: list[Experience] = []
            # a shared lock: a batch being appended is read whole, after its writer is done
            with open(self.path, "rb") as f, _file_lock(f.fileno(), fcntl.LOCK_SH):
                f.seek(self._offset)
                while len(out) < n:
                    start, raw = self._offset, f.readline()
                    if not raw.endswith(b"\n"):
                        break  # end of file, or a line still being written
                    self._offset += len(raw)
                    self._line += 1
                    exp = self._decode(raw, self._line, self.invalid) if raw.strip() else None
                    skip = self._superseded
                    if exp is not None and not (skip and skip.skips(start, exp.eid.batch)):
                        out.append(exp)
            return out

    def discard_stored(self, after_step: int | None) -> None:
        """Never return the lines stored now past the read position from explore steps
        after ``after_step`` (None: any step); see ``trinity.buffer.superseded``."""
        with self._lock:
            end = os.path.getsize(self.path) if os.path.exists(self.path) else 0
            self._superseded = Superseded(end=end, step=after_step)

    def read_all(self) -> list[Experience]:
        """Every complete line of the file, independent of the cursor (and of ``invalid``)."""
        out: list[Experience] = []
        if not os.path.exists(self.path):
            return out
        with open(self.path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                if raw.endswith(b"\n") and raw.strip():
                    exp = self._decode(raw, number, InvalidRows())
                    if exp is not None:
                        out.append(exp)
        return out

    def _decode(self, raw: bytes, line: int, invalid: InvalidRows) -> Experience | None:
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise TypeError(f"expected a JSON object, got {type(obj).__name__}")
            return with_media(obj, self.media)
        # torch raises RuntimeError for a shape that does not match the data
        except (
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            RuntimeError,
            FileNotFoundError,
        ) as exc:
            message = f"{self.path}, line {line}: not a stored experience ({_describe(exc)})"
            if not self.skip_invalid:
                raise MalformedRowError(message) from exc
            invalid.record(message)
            return None

    def state_dict(self) -> dict[str, Any]:
        return {"offset": self._offset, "line": self._line}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._offset = int(state["offset"])
        self._line = int(state["line"])


def with_media(obj: dict[str, Any], media: MediaDir) -> Experience:
    """The experience of a decoded line, with its images' tensors when it names some."""
    exp = experience_from_dict(obj)
    if obj.get("media_digest"):
        exp.media = media.get(str(obj["media_digest"]))
    return exp


def _describe(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing key {exc}"
    return f"{type(exc).__name__}: {exc}"
