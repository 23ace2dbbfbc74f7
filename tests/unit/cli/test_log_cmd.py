"""``trinity log`` on real log files written by the actor loggers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from trinity.cli.log import job_dir_of_config, main
from trinity.monitor.log_files import (
    LogFile,
    LogFilter,
    LogFollower,
    find_log_files,
    parse_records,
    read_records,
    select_files,
)
from trinity.utils.log import get_actor_logger

PLANTED = "workflow raised ZeroDivisionError on task 17"


def _write(job_dir: Path, actor: str, lines: list[str], node: str | None = None) -> Path:
    log_dir = job_dir / "log" / node if node else job_dir / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"{actor}.log"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    """A run with explorer, trainer and four runners; runner 3 logged one error with a traceback."""
    job = tmp_path / "proj" / "exp"
    _write(
        job,
        "explorer",
        [
            "[2025-01-31 12:00:00] [INFO] [explorer] explore step 1 begins (policy version 0)",
            "[2025-01-31 12:00:09] [WARNING] [explorer] explore step 1: 1 task(s) failed, 0 timed out",
            "[2025-01-31 12:00:10] [INFO] [explorer] explore step 1 ends: rollout/reward/mean=0.5",
        ],
    )
    _write(
        job,
        "trainer",
        [
            "[2025-01-31 12:00:11] [INFO] [trainer] train step 1 begins with 16 experiences",
            "[2025-01-31 12:00:20] [INFO] [trainer] train step 1 ends: actor/pg_loss=0.01",
        ],
    )
    for n in range(3):
        _write(
            job,
            f"explorer_runner_{n}",
            [f"[2025-01-31 12:00:0{n + 1}] [INFO] [explorer_runner_{n}] task {n} done"],
        )
    _write(
        job,
        "explorer_runner_3",
        [
            "[2025-01-31 12:00:02] [INFO] [explorer_runner_3] task 16 done",
            "[2025-01-31 12:00:05] [DEBUG] [explorer_runner_3] ZeroDivisionError is only a word here",
            f"[2025-01-31 12:00:06] [ERROR] [explorer_runner_3] {PLANTED}",
            "Traceback (most recent call last):",
            '  File "workflow.py", line 3, in run',
            "ZeroDivisionError: division by zero",
            "[2025-01-31 12:00:07] [INFO] [explorer_runner_3] retrying task 17",
        ],
    )
    return job


def test_finds_the_planted_error_by_keyword_and_level(job_dir, capsys):
    code = main(["--job-dir", str(job_dir), "--level", "error", "--grep", "ZeroDivision"])

    out = capsys.readouterr().out
    assert code == 0
    # the DEBUG line also says ZeroDivisionError, but is below the level; the error
    # comes with its traceback lines, and nothing else is printed
    assert out.splitlines() == [
        f"[2025-01-31 12:00:06] [ERROR] [explorer_runner_3] {PLANTED}",
        "Traceback (most recent call last):",
        '  File "workflow.py", line 3, in run',
        "ZeroDivisionError: division by zero",
    ]


def test_keyword_alone_also_finds_the_debug_line(job_dir, capsys):
    assert main(["--job-dir", str(job_dir), "--grep", "ZeroDivisionError"]) == 0
    out = capsys.readouterr().out
    assert "[DEBUG] [explorer_runner_3] ZeroDivisionError is only a word" in out
    assert PLANTED in out


def test_level_filter_across_all_actors_merges_by_time(job_dir, capsys):
    assert main(["--job-dir", str(job_dir), "--level", "WARNING"]) == 0
    firsts = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert firsts == [
        f"[2025-01-31 12:00:06] [ERROR] [explorer_runner_3] {PLANTED}",
        "[2025-01-31 12:00:09] [WARNING] [explorer] explore step 1: 1 task(s) failed, 0 timed out",
    ]


def test_nothing_matching_exits_1(job_dir, capsys):
    assert main(["--job-dir", str(job_dir), "--actor", "trainer", "--level", "error"]) == 1
    assert capsys.readouterr().out == ""


def test_listing_counts_records_per_level(job_dir, capsys):
    assert main(["--job-dir", str(job_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["FILE", "SIZE", "RECORDS", "WARNING", "ERROR", "MODIFIED", "PATH"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert sorted(rows) == sorted(
        ["explorer", "trainer"] + [f"explorer_runner_{n}" for n in range(4)]
    )
    # runner 3: 4 records (the traceback is part of the error record), 0 warnings, 1 error
    assert rows["explorer_runner_3"][3:6] == ["4", "0", "1"]
    assert rows["explorer"][3:6] == ["3", "1", "0"]
    assert rows["explorer_runner_3"][-1] == "log/explorer_runner_3.log"


def test_actor_patterns_and_tail(job_dir, capsys):
    assert main(["--job-dir", str(job_dir), "--actor", "explorer_runner_*", "-n", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    # the last two records of the runners by time: runner 3's error (with traceback) and retry
    assert out[0].endswith(PLANTED)
    assert out[-1] == "[2025-01-31 12:00:07] [INFO] [explorer_runner_3] retrying task 17"
    assert len(out) == 5


def test_unknown_actor_names_the_known_ones(job_dir, capsys):
    assert main(["--job-dir", str(job_dir), "--actor", "synchroniser"]) == 1
    err = capsys.readouterr().err
    assert "explorer_runner_3" in err and "trainer" in err


def test_bad_level_is_a_usage_error(job_dir, capsys):
    assert main(["--job-dir", str(job_dir), "--level", "loud"]) == 2
    assert "DEBUG, INFO, WARNING, ERROR" in capsys.readouterr().err


def test_grouped_by_node_files_are_found_and_labelled(tmp_path, capsys):
    job = tmp_path / "job"
    _write(job, "explorer", ["[2025-01-31 12:00:00] [ERROR] [explorer] on node a"], node="10.0.0.1")
    _write(job, "explorer", ["[2025-01-31 12:00:01] [ERROR] [explorer] on node b"], node="10.0.0.2")

    files = find_log_files(job)
    assert [f.label for f in files] == ["10.0.0.1/explorer", "10.0.0.2/explorer"]
    assert main(["--job-dir", str(job), "--level", "error"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "10.0.0.1/explorer: [2025-01-31 12:00:00] [ERROR] [explorer] on node a",
        "10.0.0.2/explorer: [2025-01-31 12:00:01] [ERROR] [explorer] on node b",
    ]


def test_records_written_by_the_actor_logger_parse_back(tmp_path):
    logger = get_actor_logger("explorer_runner_3", tmp_path / "log", level="DEBUG")
    logger.debug("starting")
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        logger.exception("task 17 failed")
    for handler in logger.handlers:
        handler.flush()

    (source,) = select_files(find_log_files(tmp_path), ["explorer_runner_3"])
    records = read_records([source])
    assert [r.level for r in records] == ["DEBUG", "ERROR"]
    assert records[1].lines[0].endswith("[ERROR] [explorer_runner_3] task 17 failed")
    assert records[1].lines[-1] == "ZeroDivisionError: division by zero"
    assert LogFilter("error", "division").matches(records[1])
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


def test_text_before_the_first_record_has_no_level(tmp_path):
    source = LogFile(tmp_path / "x.log", "x")
    records = parse_records(
        source, ["Fatal Python error: Aborted", "[2025-01-31 12:00:00] [INFO] [x] up"]
    )
    assert [(r.level, r.effective_level) for r in records] == [(None, "INFO"), ("INFO", "INFO")]


def test_follow_reports_appended_records_and_new_files(job_dir):
    follower = LogFollower(job_dir, ["explorer_runner_*"])
    assert follower.poll() == []  # what existed before is not reported again

    with open(job_dir / "log" / "explorer_runner_3.log", "a", encoding="utf-8") as f:
        f.write(
            "[2025-01-31 12:01:00] [ERROR] [explorer_runner_3] timed out\n  waiting for the engine\n"
        )
    _write(
        job_dir, "explorer_runner_4", ["[2025-01-31 12:01:01] [INFO] [explorer_runner_4] started"]
    )
    _write(job_dir, "trainer_extra", ["[2025-01-31 12:01:02] [INFO] [trainer_extra] not selected"])

    seen = []
    stop = threading.Event()
    thread = threading.Thread(
        target=follower.follow,
        args=(seen.append,),
        kwargs={"interval": 0.05, "keep_going": lambda: not stop.is_set()},
    )
    thread.start()
    deadline = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join(timeout=5)

    assert [r.lines for r in seen] == [
        ["[2025-01-31 12:01:00] [ERROR] [explorer_runner_3] timed out", "  waiting for the engine"],
        ["[2025-01-31 12:01:01] [INFO] [explorer_runner_4] started"],
    ]


def test_config_names_the_newest_timestamped_run(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        f"project: proj\nname: exp\ncheckpoint_root_dir: {tmp_path}\ncontinue_from_checkpoint: false\n"
    )
    for stamp in ("20250101120000", "20250102120000"):
        (tmp_path / "proj" / f"exp_{stamp}" / "log").mkdir(parents=True)
    (tmp_path / "proj" / "exp_notes").mkdir()

    assert job_dir_of_config(config) == tmp_path / "proj" / "exp_20250102120000"
