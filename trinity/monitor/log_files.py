"""Reading a run's per-actor log files: find, parse, filter, follow (``trinity log``).

Hand-written: no library parses this record format (a line and its traceback) and merges
files by time; following polls file sizes, which, unlike inotify (``watchdog``), sees NFS
writes from other nodes.

A run writes ``<job_dir>/log/<actor>.log`` (or ``log/<node_ip>/<actor>.log`` with
``log.group_by_node``; a multi-stage run has one job directory per stage,
``<job_dir>/<stage>/log/...``). Each record starts with a line
``[2025-01-31 12:00:00] [ERROR] [explorer_runner_3] message``; the lines that follow
without that prefix (a traceback) belong to it, so filters keep or drop them together.

    files = find_log_files(job_dir)
    records = read_records(select_files(files, ["explorer_runner_*"]))
    errors = [r for r in records if LogFilter(min_level="ERROR", pattern="timeout").matches(r)]
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fnmatch import fnmatchcase
from pathlib import Path

from trinity.utils.log import DATE_FORMAT, LEVELS, LINE_PATTERN

LOG_DIR = "log"
SUFFIX = ".log"
# A line without a level (printed output, a crash dump) counts as INFO for --level.
UNKNOWN_LEVEL = "INFO"


@dataclass(frozen=True)
class LogFile:
    """One actor's log file; ``node`` and ``stage`` are set for grouped and staged runs."""

    path: Path
    actor: str
    node: str | None = None
    stage: str | None = None

    @property
    def label(self) -> str:
        """``[stage/][node/]actor``: unique among the files of one job directory."""
        return "/".join(p for p in (self.stage, self.node, self.actor) if p)


@dataclass
class LogRecord:
    """One logged record: its first line's fields and its full text (continuation lines too)."""

    source: LogFile
    time: datetime | None
    level: str | None
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def effective_level(self) -> str:
        return self.level if self.level in LEVELS else UNKNOWN_LEVEL


def _files_in(log_dir: Path, stage: str | None) -> list[LogFile]:
    files = [LogFile(p, p.stem, None, stage) for p in sorted(log_dir.glob(f"*{SUFFIX}"))]
    for node_dir in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        files += [
            LogFile(p, p.stem, node_dir.name, stage) for p in sorted(node_dir.glob(f"*{SUFFIX}"))
        ]
    return files


def find_log_files(job_dir: Path) -> list[LogFile]:
    """Every log file of the run in ``job_dir`` (and of its stages), in a stable order."""
    job_dir = Path(job_dir)
    files: list[LogFile] = []
    if (job_dir / LOG_DIR).is_dir():
        files += _files_in(job_dir / LOG_DIR, None)
    if job_dir.is_dir():
        for stage_dir in sorted(p for p in job_dir.iterdir() if (p / LOG_DIR).is_dir()):
            files += _files_in(stage_dir / LOG_DIR, stage_dir.name)
    return files


def select_files(files: Sequence[LogFile], actors: Sequence[str] = ()) -> list[LogFile]:
    """The files whose actor (or label) matches one of the ``fnmatch`` patterns; all if none."""
    if not actors:
        return list(files)
    return [
        f for f in files if any(fnmatchcase(f.actor, a) or fnmatchcase(f.label, a) for a in actors)
    ]


class RecordParser:
    """Turns the lines of one file into records, one line at a time.

    ``feed`` returns the records a line completes (the previous record, when the line
    starts a new one); ``flush`` returns the record still open.
    """

    def __init__(self, source: LogFile) -> None:
        self.source = source
        self.current: LogRecord | None = None
        self._last_time: datetime | None = None

    def feed(self, line: str) -> list[LogRecord]:
        line = line.rstrip("\r\n")
        match = LINE_PATTERN.match(line)
        if match is None:
            if self.current is None:
                # Text before any record (e.g. a crash dump): its own record, no level.
                self.current = LogRecord(self.source, self._last_time, None)
            self.current.lines.append(line)
            return []
        done = self.flush()
        stamp = datetime.strptime(match["time"], DATE_FORMAT)
        self._last_time = stamp
        self.current = LogRecord(self.source, stamp, match["level"], [line])
        return done

    def flush(self) -> list[LogRecord]:
        done, self.current = self.current, None
        return [done] if done is not None else []


def parse_records(source: LogFile, lines: Iterable[str]) -> list[LogRecord]:
    """The records of ``lines`` (the text of ``source``) in file order."""
    parser = RecordParser(source)
    records: list[LogRecord] = []
    for line in lines:
        records += parser.feed(line)
    return records + parser.flush()


def read_records(files: Sequence[LogFile]) -> list[LogRecord]:
    """The records of every file, merged by time (file order breaks ties)."""
    records: list[LogRecord] = []
    for f in files:
        with open(f.path, encoding="utf-8", errors="replace") as stream:
            records += parse_records(f, stream)
    # sorted() is stable: records of one second keep their file order
    return sorted(records, key=lambda r: r.time or datetime.min)


@dataclass(frozen=True)
class LogFilter:
    """Which records to show: a minimum level and a regular expression over the record text.

    Raises:
        ValueError: an unknown level; ``re.error``: a pattern that does not compile.
    """

    min_level: str | None = None
    pattern: str | None = None
    ignore_case: bool = False
    _regex: re.Pattern[str] | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.min_level is not None and self.min_level.upper() not in LEVELS:
            raise ValueError(
                f"unknown level '{self.min_level}'; valid: {', '.join(LEVELS)} (any case)"
            )
        if self.pattern is not None:
            flags = re.IGNORECASE if self.ignore_case else 0
            object.__setattr__(self, "_regex", re.compile(self.pattern, flags))

    def matches(self, record: LogRecord) -> bool:
        if self.min_level is not None:
            if LEVELS.index(record.effective_level) < LEVELS.index(self.min_level.upper()):
                return False
        return self._regex is None or self._regex.search(record.text) is not None


def level_counts(records: Iterable[LogRecord]) -> dict[str, int]:
    """How many records of each level (unknown levels count as INFO)."""
    counts = dict.fromkeys(LEVELS, 0)
    for record in records:
        counts[record.effective_level] += 1
    return counts


class LogFollower:
    """Reports records appended to a run's log files after it was created (``tail -f``).

    Files that appear later (a runner that starts late, a new stage) are read from their
    start. A record is reported once the next record of its file begins, or after a poll
    that brought its file nothing new (its traceback is then complete).
    """

    def __init__(self, job_dir: Path, actors: Sequence[str] = ()) -> None:
        self.job_dir = Path(job_dir)
        self.actors = tuple(actors)
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, str] = {}
        self.parsers: dict[Path, RecordParser] = {}
        for f in self._files():
            self.offsets[f.path] = f.path.stat().st_size
            self.parsers[f.path] = RecordParser(f)

    def _files(self) -> list[LogFile]:
        return select_files(find_log_files(self.job_dir), self.actors)

    def poll(self) -> list[LogRecord]:
        """Records completed since the last poll, merged by time."""
        done: list[LogRecord] = []
        for f in self._files():
            parser = self.parsers.setdefault(f.path, RecordParser(f))
            offset = self.offsets.get(f.path, 0)
            size = f.path.stat().st_size
            if size < offset:  # truncated or replaced: start over
                offset, self.partial[f.path] = 0, ""
            if size == offset:
                done += parser.flush()
                continue
            with open(f.path, "rb") as stream:
                stream.seek(offset)
                chunk = stream.read(size - offset)
            self.offsets[f.path] = size
            text = self.partial.pop(f.path, "") + chunk.decode("utf-8", errors="replace")
            *lines, rest = text.split("\n")
            if rest:
                self.partial[f.path] = rest  # a line still being written
            for line in lines:
                done += parser.feed(line)
        return sorted(done, key=lambda r: r.time or datetime.min)

    def follow(
        self,
        emit: Callable[[LogRecord], None],
        *,
        interval: float = 0.5,
        keep_going: Callable[[], bool] = lambda: True,
        record_filter: LogFilter | None = None,
    ) -> None:
        """Poll every ``interval`` seconds and ``emit`` matching records until ``keep_going()`` is false.

        On the way out the records still open are reported too.
        """
        while True:
            running = keep_going()
            found = self.poll()
            if not running:
                found += [r for p in self.parsers.values() for r in p.flush()]
            for record in found:
                if record_filter is None or record_filter.matches(record):
                    emit(record)
            if not running:
                return
            time.sleep(interval)
