"""``enable_progress_bar``: a tqdm bar on stderr while a taskset is read, none by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trinity.buffer import SQLTaskStorage, TasksetReader
from trinity.config.schema.buffer import FormatConfig, TasksetConfig

ROWS = [{"prompt": f"q{i}", "response": str(i)} for i in range(7)]


def read(path: str, storage_type: str = "file", **fields) -> TasksetReader:
    """The reader of a taskset configured as the YAML would (the config's own dataclass)."""
    return TasksetReader(
        TasksetConfig(
            name="arith",
            storage_type=storage_type,
            path=path,
            format=FormatConfig(prompt_key="prompt"),
            **fields,
        ),
        batch_size=2,
        default_workflow="math_workflow",
    )


@pytest.fixture
def jsonl(tmp_path: Path) -> str:
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return str(tmp_path)


def test_a_file_taskset_shows_a_bar_of_its_rows_when_enabled(
    jsonl: str, capfd: pytest.CaptureFixture[str]
) -> None:
    reader = read(jsonl, enable_progress_bar=True)
    out, err = capfd.readouterr()
    assert reader.num_tasks == 7
    assert out == ""
    # tqdm's final line: "reading <file>: 100%|...| 7/7 [..."
    assert f"reading {jsonl}/train.jsonl" in err, err
    assert "7/7" in err, err


def test_no_bar_by_default(jsonl: str, capfd: pytest.CaptureFixture[str]) -> None:
    assert read(jsonl).num_tasks == 7
    assert read(jsonl, enable_progress_bar=False).num_tasks == 7
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_a_sql_taskset_shows_a_bar_named_after_the_taskset(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "tasks.db")
    storage = SQLTaskStorage(db)
    storage.write_rows(ROWS)
    storage.close()
    reader = read(db, storage_type="sql", enable_progress_bar=True)
    assert [t.raw for t in reader.read_batch()] == ROWS[:2]
    err = capfd.readouterr().err
    assert "reading arith" in err and "7/7" in err, err
    assert db not in err  # a URL may hold a password
