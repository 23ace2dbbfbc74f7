"""``ExperienceSource``: pages of a JSON-lines file through its line index, and rows that
are not experiences shown as one-line problems instead of raised."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from view_testing import experiences, write_jsonl

from trinity.buffer import SQLExperienceStorage
from trinity.view import ExperienceSource, RowProblem


@pytest.fixture
def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times ``json.loads`` ran since the fixture was set up (one per line read)."""
    calls = [0]
    real = json.loads

    def counting(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(json, "loads", counting)
    return calls


def test_a_page_of_a_large_file_decodes_only_its_own_lines(
    tmp_path: Path, count_decodes: list[int]
) -> None:
    path = tmp_path / "exps.jsonl"
    write_jsonl(path, experiences(3000))
    source = ExperienceSource(str(path))
    assert source.count() == 3000
    count_decodes[0] = 0
    page = source.page(2500, 10)
    assert count_decodes[0] == 10  # the index of line offsets was built without decoding
    assert [v.index for v in page] == list(range(2500, 2510))
    assert [v.prompt for v in page][:2] == ["what is 2500 + 2500?", "what is 2501 + 2501?"]
    assert source.count() == 3000 and count_decodes[0] == 10


def test_the_index_follows_a_growing_file_and_a_rewritten_one(tmp_path: Path) -> None:
    path = tmp_path / "exps.jsonl"
    write_jsonl(path, experiences(3))
    source = ExperienceSource(str(path))
    assert source.count() == 3
    write_jsonl(path, experiences(2, start=3))
    with open(path, "ab") as f:  # a line still being written is not an experience yet
        f.write(b'{"tokens": ')
    assert source.count() == 5
    assert [v.prompt for v in source.page(3, 5)] == ["what is 3 + 3?", "what is 4 + 4?"]
    path.unlink()  # replaced by a shorter file: indexed again from its start
    write_jsonl(path, experiences(1, start=7))
    assert source.count() == 1
    assert [v.prompt for v in source.page(0, 5)] == ["what is 7 + 7?"]


def test_malformed_jsonl_lines_are_problems_in_their_place(tmp_path: Path) -> None:
    path = tmp_path / "exps.jsonl"
    write_jsonl(path, experiences(1))
    with open(path, "a") as f:
        f.write("{not json\n")
        f.write('"just a string"\n')
        f.write("\n")  # blank lines are not experiences and take no index
        f.write(json.dumps({"tokens": [1, 2]}) + "\n")
    bad_reward = json.loads(path.read_text().splitlines()[0])
    bad_reward["reward"] = "high"
    with open(path, "a") as f:
        f.write(json.dumps(bad_reward) + "\n")
    write_jsonl(path, experiences(1, start=1))

    source = ExperienceSource(str(path))
    assert source.count() == 6
    rows = source.page(0, 10)
    assert [type(r).__name__ for r in rows] == [
        "ExperienceView",
        "RowProblem",
        "RowProblem",
        "RowProblem",
        "RowProblem",
        "ExperienceView",
    ]
    assert [r.index for r in rows] == list(range(6))
    assert rows[5].prompt == "what is 1 + 1?"
    problem = rows[1]
    assert isinstance(problem, RowProblem)
    assert f"{path}, line 2: not a stored experience" in problem.message
    assert "line 6" in rows[4].message and "reward" in rows[4].message
    assert all("\n" not in r.message for r in rows if isinstance(r, RowProblem))


def test_a_malformed_sqlite_row_is_a_problem_in_its_place(tmp_path: Path) -> None:
    path = tmp_path / "buffer.db"
    storage = SQLExperienceStorage(str(path))
    storage.write(experiences(4))
    storage.close()
    with sqlite3.connect(path) as db:  # rows written by another tool
        db.execute("UPDATE experience SET tokens = x'00' WHERE id = 2")
        db.execute("UPDATE experience SET info = '{not json' WHERE id = 3")

    source = ExperienceSource(str(path))
    rows = source.page(0, 10)
    assert [r.index for r in rows] == [0, 1, 2, 3]
    assert isinstance(rows[1], RowProblem) and "row id 2" in rows[1].message
    assert isinstance(rows[2], RowProblem) and "row id 3" in rows[2].message
    assert [rows[0].prompt, rows[3].prompt] == ["what is 0 + 0?", "what is 3 + 3?"]
    source.close()


@pytest.mark.parametrize("suffix", [".jsonl", ".db"])
def test_offsets_past_the_end_or_negative(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"exps{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, experiences(3))
    else:
        storage = SQLExperienceStorage(str(path))
        storage.write(experiences(3))
        storage.close()
    source = ExperienceSource(str(path))
    assert source.page(10**30, 5) == []  # past SQLite's 64-bit integers
    assert source.page(2**63 - 1, 5) == []
    assert [r.index for r in source.page(-4, 2)] == [0, 1]
    source.close()


def test_the_cli_prints_bad_rows_and_unreadable_sources_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trinity.cli.view import main as view_main

    path = tmp_path / "exps.jsonl"
    path.write_text("{not json\n")
    write_jsonl(path, experiences(1, start=1))
    assert view_main(["view", "--db", str(path), "--print"]) == 0
    out = capsys.readouterr().out
    assert f"#0  {path}, line 1: not a stored experience (JSONDecodeError" in out
    assert "what is 1 + 1?" in out
    assert view_main(["view", "--db", str(path), "--print", "--offset", str(10**30)]) == 0
    assert "2 experiences; nothing at this offset" in capsys.readouterr().out

    garbage = tmp_path / "garbage.db"
    garbage.write_text("not a database\n" * 200)
    assert view_main(["view", "--db", str(garbage), "--print"]) == 1
    err = capsys.readouterr().err
    assert err == f"trinity view: cannot read the database '{garbage}': file is not a database\n"

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE experience (id INTEGER PRIMARY KEY, x TEXT)")
        conn.execute("INSERT INTO experience VALUES (1, 'a')")
    assert view_main(["view", "--db", str(other), "--print"]) == 1
    assert "no such column" in capsys.readouterr().err
    assert view_main(["view", "--db", str(other), "--print", "--table", "exps"]) == 1
    assert "no table 'exps' in" in capsys.readouterr().err
    with sqlite3.connect(other) as conn:  # nothing was created
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert tables == ["experience"]
