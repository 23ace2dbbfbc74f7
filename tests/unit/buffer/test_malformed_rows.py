"""Malformed rows: an error naming file, line and key, or skipped and counted on request."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest
from buffer_testing import full_experience, storage_config

from trinity.buffer import (
    InvalidRows,
    JsonlReader,
    JsonlWriter,
    MalformedRowError,
    MissingKeyError,
    SQLExperienceStorage,
    SQLTaskStorage,
    TasksetReader,
    make_experience_buffer,
    read_rows,
)

BAD_TASKS = "\n".join(
    [
        json.dumps({"prompt": "1+1", "response": "2"}),  # line 1: fine
        '{"prompt": "2+2", "response": ',  # line 2: bad JSON
        json.dumps({"question": "3+3"}),  # line 3: no prompt key
        json.dumps({"prompt": ["4", "+", "4"]}),  # line 4: prompt of the wrong type
        json.dumps([1, 2]),  # line 5: not an object
        json.dumps({"prompt": 5, "response": "5"}),  # line 6: a number is a fine prompt
    ]
)


def write_tasks(tmp_path: Path, text: str, name: str = "train.jsonl") -> Path:
    (tmp_path / name).write_text(text + "\n")
    return tmp_path / name


def reader(tmp_path: Path, **fields) -> TasksetReader:
    return TasksetReader(
        storage_config(path=str(tmp_path), **fields), batch_size=2, default_workflow="math_workflow"
    )


def test_first_bad_row_stops_the_reader_with_file_and_line(tmp_path: Path) -> None:
    file = write_tasks(tmp_path, BAD_TASKS)
    with pytest.raises(MalformedRowError, match=rf"{file}, line 2 column \d+: invalid JSON"):
        reader(tmp_path)


@pytest.mark.parametrize(
    ("line", "error", "message"),
    [
        (3, MissingKeyError, r"line 1: missing key 'prompt' \(named by format.prompt_key\)"),
        (
            4,
            MalformedRowError,
            r"line 1: key 'prompt' \(named by format.prompt_key\) must be a string, got list",
        ),
        (5, MalformedRowError, r"line 1: expected a JSON object per row, got list"),
    ],
)
def test_each_kind_of_bad_row_is_named(
    tmp_path: Path, line: int, error: type, message: str
) -> None:
    write_tasks(tmp_path, BAD_TASKS.splitlines()[line - 1])
    with pytest.raises(error, match=message):
        reader(tmp_path)


def test_skip_invalid_rows_counts_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    file = write_tasks(tmp_path, BAD_TASKS)
    with caplog.at_level(logging.WARNING, logger="trinity.buffer.task_reader"):
        r = reader(tmp_path, skip_invalid_rows=True)
    assert [t.raw["prompt"] for t in r.read_all()] == ["1+1", 5]
    assert r.invalid.count == 4
    assert [m.split(": ")[0] for m in r.invalid.examples] == [
        f"{file}, line 2 column 31",
        f"{file}, line 3",
        f"{file}, line 4",
        f"{file}, line 5",
    ]
    assert "skipped 4 invalid row(s)" in caplog.text


def test_messages_rows_need_role_and_content(tmp_path: Path) -> None:
    rows = [
        {"messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "user"}]},
        {"messages": "hi"},
    ]
    write_tasks(tmp_path, "\n".join(json.dumps(r) for r in rows))
    r2_cfg = storage_config(path=str(tmp_path))
    r2_cfg.format.prompt_type = "messages"
    with pytest.raises(
        MalformedRowError, match=r"line 2: key 'messages' .* element 0 is \{'role': 'user'\}"
    ):
        TasksetReader(r2_cfg, batch_size=1, default_workflow="w")
    r2_cfg.skip_invalid_rows = True
    r = TasksetReader(r2_cfg, batch_size=1, default_workflow="w")
    assert r.num_tasks == 1 and r.invalid.count == 2
    assert "must be a list of messages, got str" in r.invalid.examples[1]


def test_csv_row_with_wrong_field_count(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text("prompt,response\n1+1,2\n2+2,4,extra\n3+3,6\n")
    with pytest.raises(MalformedRowError, match=r"train.csv, line 3: .*number of fields"):
        read_rows(str(tmp_path))
    invalid = InvalidRows()
    assert read_rows(str(tmp_path), invalid=invalid) == [
        {"prompt": "1+1", "response": "2"},
        {"prompt": "3+3", "response": "6"},
    ]
    assert invalid.count == 1


def test_sql_taskset_rows(tmp_path: Path) -> None:
    db = str(tmp_path / "tasks.db")
    storage = SQLTaskStorage(db)
    storage.write_rows([{"prompt": "a"}, {"prompt": None}, {"prompt": "c"}])
    storage.close()
    with pytest.raises(
        MalformedRowError, match=r"task row 1 \(0-based\): key 'prompt' .* got null"
    ):
        TasksetReader(
            storage_config(storage_type="sql", path=db), batch_size=1, default_workflow="w"
        )
    r = TasksetReader(
        storage_config(storage_type="sql", path=db, skip_invalid_rows=True),
        batch_size=1,
        default_workflow="w",
    )
    assert [t.raw["prompt"] for t in r.read_all()] == ["a", "c"] and r.invalid.count == 1


def test_experience_file_skips_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "exps.jsonl"
    with JsonlWriter(path) as w:
        w.write([full_experience(0)])
    with open(path, "a") as f:
        f.write("not json\n")
        f.write(json.dumps({"tokens": {"dtype": "int64", "shape": [3], "data": [1]}}) + "\n")
        f.write("[1, 2]\n")
    with JsonlWriter(path) as w:
        w.write([full_experience(1)])
    with pytest.raises(MalformedRowError, match=rf"{path}, line 2: not a stored experience"):
        JsonlReader(path).read_new(10)
    reader = JsonlReader(path, skip_invalid=True)
    assert [e.prompt_text for e in reader.read_new(10)] == ["question 0", "question 1"]
    assert reader.invalid.count == 3
    assert "line 3" in reader.invalid.examples[1] and "line 4" in reader.invalid.examples[2]

    buffer = make_experience_buffer(
        storage_config(storage_type="file", path=str(path), skip_invalid_rows=True)
    )
    assert len(buffer.get(10, timeout=0)) == 2 and buffer.invalid.count == 3
    buffer.close()


def test_corrupt_sql_row_names_table_and_id(tmp_path: Path) -> None:
    db = tmp_path / "buffer.db"
    storage = SQLExperienceStorage(str(db))
    storage.write([full_experience(i) for i in range(3)])
    storage.close()
    with sqlite3.connect(db) as conn:  # a row written by some other tool, with a wrong shape
        meta = json.loads(
            conn.execute("SELECT tensor_meta FROM experience WHERE id = 2").fetchone()[0]
        )
        meta["tokens"]["shape"] = [7]
        conn.execute("UPDATE experience SET tensor_meta = ? WHERE id = 2", (json.dumps(meta),))
    storage = SQLExperienceStorage(str(db))
    with pytest.raises(MalformedRowError, match=r"table 'experience', row id 2"):
        storage.read_new(10)
    storage.close()
    skipping = SQLExperienceStorage(str(db), skip_invalid=True)
    assert [e.prompt_text for e in skipping.read_new(10)] == ["question 0", "question 2"]
    assert skipping.invalid.count == 1
    skipping.close()
