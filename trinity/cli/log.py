"""``trinity log``: list, tail and filter a run's per-actor log files.

    trinity log --job-dir checkpoints/proj/exp                    # list the files
    trinity log --config run.yaml --level error                   # every error, all actors
    trinity log --job-dir DIR --actor 'explorer_runner_*' --grep Timeout
    trinity log --job-dir DIR --actor trainer -n 20 --follow      # tail -f

Records from several files are merged by time. A record is its first line plus the
lines that follow it (a traceback), so ``--level`` and ``--grep`` keep or drop them
whole. Exit status: 0 when something was listed or matched, 1 when nothing matched or
there are no logs, 2 for a bad config or option.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime
from pathlib import Path

from trinity.monitor.log_files import (
    LogFile,
    LogFilter,
    LogFollower,
    LogRecord,
    find_log_files,
    level_counts,
    read_records,
    select_files,
)

EXIT_NOTHING = 1
EXIT_USAGE = 2
FOLLOW_TAIL = 10  # records shown before following when -n is not given
_TIMESTAMP_SUFFIX = re.compile(r"_\d{14}$")


class JobDirError(RuntimeError):
    """The run's job directory cannot be found."""


def job_dir_of_config(path: str | Path) -> Path:
    """The job directory a config's run wrote to.

    With ``continue_from_checkpoint: false`` each run gets ``<name>_<timestamp>``; the
    newest such directory is the one meant.
    """
    from trinity.config import job_dir, read_config

    cfg = read_config(path)
    base = job_dir(cfg)
    if cfg.continue_from_checkpoint:
        if base.is_dir():
            return base
        raise JobDirError(f"the job directory of {path} does not exist: {base}")
    runs = sorted(
        p
        for p in base.parent.glob(f"{base.name}_*")
        if p.is_dir() and _TIMESTAMP_SUFFIX.search(p.name)
    )
    if not runs:
        raise JobDirError(
            f"no run of {path} found: continue_from_checkpoint is false, so runs are "
            f"{base}_<YYYYmmddHHMMSS>, and there is none"
        )
    return runs[-1]


def format_record(record: LogRecord, prefix_source: bool) -> str:
    """The record's text, prefixed with its file's label when that is not obvious."""
    if prefix_source or record.level is None:
        return "\n".join(f"{record.source.label}: {line}" for line in record.lines)
    return record.text


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def list_files(files: list[LogFile], job_dir: Path) -> str:
    """A table of the files: label, size, records per level, last change, path."""
    rows = [("FILE", "SIZE", "RECORDS", "WARNING", "ERROR", "MODIFIED", "PATH")]
    for f in files:
        stat = f.path.stat()
        counts = level_counts(read_records([f]))
        rows.append(
            (
                f.label,
                _size(stat.st_size),
                str(sum(counts.values())),
                str(counts["WARNING"]),
                str(counts["ERROR"] + counts["CRITICAL"]),
                datetime.fromtimestamp(stat.st_mtime).strftime("%Y-%m-%d %H:%M:%S"),
                str(f.path.relative_to(job_dir)) if f.path.is_relative_to(job_dir) else str(f.path),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _cmd_log(args: argparse.Namespace) -> int:
    from trinity.config import ConfigError

    try:
        record_filter = LogFilter(args.level, args.grep, args.ignore_case)
    except (ValueError, re.error) as err:
        print(f"trinity: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        job_dir = Path(args.job_dir) if args.job_dir else job_dir_of_config(args.config)
    except ConfigError as err:
        print(f"trinity: config error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except JobDirError as err:
        print(f"trinity: {err}", file=sys.stderr)
        return EXIT_NOTHING

    all_files = find_log_files(job_dir)
    files = select_files(all_files, args.actor)
    if not files:
        where = (
            f"{job_dir}/log" if not all_files else f"{job_dir} for actor(s) {', '.join(args.actor)}"
        )
        known = f" (actors: {', '.join(f.label for f in all_files)})" if all_files else ""
        print(f"trinity: no log files in {where}{known}", file=sys.stderr)
        return EXIT_NOTHING

    showing = args.level or args.grep is not None or args.lines is not None or args.follow
    if args.list or not showing:
        print(list_files(files, job_dir))
        return 0

    prefix = len({(f.stage, f.node) for f in files}) > 1
    records = [r for r in read_records(files) if record_filter.matches(r)]
    tail = args.lines if args.lines is not None else (FOLLOW_TAIL if args.follow else None)
    if tail is not None:
        records = records[-tail:] if tail > 0 else []
    for record in records:
        print(format_record(record, prefix))
    if not args.follow:
        return 0 if records else EXIT_NOTHING
    try:
        LogFollower(job_dir, args.actor).follow(
            lambda r: print(format_record(r, prefix), flush=True), record_filter=record_filter
        )
    except KeyboardInterrupt:
        pass
    return 0


def add_log_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``trinity log`` on the ``trinity`` command's subparsers."""
    parser = subparsers.add_parser(
        "log",
        help="list, tail and filter a run's log files",
        description="Without filters: list the run's log files with their record counts. With "
        "--actor/--level/--grep/-n/--follow: print the matching records of every selected file, "
        "merged by time.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--job-dir", help="the run's directory, <checkpoint_root_dir>/<project>/<name>"
    )
    where.add_argument("--config", help="the run's config file (its job directory is used)")
    parser.add_argument(
        "--list", action="store_true", help="list the (selected) files even with filters"
    )
    parser.add_argument(
        "--actor",
        action="append",
        default=[],
        metavar="NAME",
        help="only this actor's file (explorer, trainer, explorer_runner_3, 'explorer_runner_*'); repeatable",
    )
    parser.add_argument(
        "--level", help="only records at this level or above (debug, info, warning, error)"
    )
    parser.add_argument(
        "--grep", metavar="PATTERN", help="only records whose text matches this regular expression"
    )
    parser.add_argument("-i", "--ignore-case", action="store_true", help="--grep ignores case")
    parser.add_argument(
        "-n", "--lines", type=int, metavar="N", help="only the last N matching records"
    )
    parser.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help=f"keep printing new records (shows the last {FOLLOW_TAIL} first)",
    )
    parser.set_defaults(func=_cmd_log)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m trinity.cli.log``: the same command without the ``trinity`` wrapper."""
    parser = argparse.ArgumentParser(prog="trinity")
    add_log_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["log", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
