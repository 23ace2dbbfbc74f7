"""Where each line of a JSON-lines file starts, so that a page decodes only its own lines.

The index is built once by scanning the file's bytes for newlines (no line is decoded),
then extended by the bytes appended since the last look: a run may still be writing the
file. A file that got shorter or was replaced (another inode) is scanned again from its
start. As ``JsonlReader`` reads it, only lines that end in a newline count (the last line
of a batch still being appended is not one yet), and blank lines take no index.

    index = LineIndex("exps.jsonl")
    index.refresh()                    # the number of lines, after scanning new bytes
    for number, raw in index.lines(40, 10):
        ...                            # line number (from 1) and bytes of lines 40..49
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator


class LineIndex:
    """Byte offsets of the complete, non-blank lines of ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._starts = array("q")  # byte offset of each indexed line
        self._numbers = array("q")  # its line number in the file, from 1 (for messages)
        self._end = 0  # byte offset just past the last complete line scanned
        self._lines = 0  # complete lines scanned, blank ones included
        self._file_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the file scanned

    def __len__(self) -> int:
        return len(self._starts)

    def refresh(self) -> int:
        """Index the lines appended since the last call; the number of lines indexed.

        Raises:
            OSError: the file cannot be read (e.g. it was deleted).
        """
        stat = os.stat(self.path)
        file_id = (stat.st_dev, stat.st_ino)
        if file_id != self._file_id or stat.st_size < self._end:
            self._starts, self._numbers = array("q"), array("q")
            self._end = self._lines = 0
            self._file_id = file_id
        if stat.st_size > self._end:
            self._scan()
        return len(self._starts)

    def _scan(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self._end)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # a line still being written: looked at again next time
                self._lines += 1
                if not raw.isspace():
                    self._starts.append(self._end)
                    self._numbers.append(self._lines)
                self._end += len(raw)

    def lines(self, first: int, count: int) -> Iterator[tuple[int, bytes]]:
        """Line number and bytes of the indexed lines ``first`` to ``first + count - 1``
        (fewer past the end); reads only those lines."""
        stop = min(len(self._starts), first + count)
        if first >= stop:
            return
        with open(self.path, "rb") as f:
            for i in range(max(0, first), stop):
                f.seek(self._starts[i])
                yield self._numbers[i], f.readline()
