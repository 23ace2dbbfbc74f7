"""Reading local datasets: formats, dataset-directory layouts, and error messages."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from trinity.buffer import (
    DatasetNotFoundError,
    MalformedRowError,
    MissingKeyError,
    find_data_files,
    read_rows,
)

ROWS = [{"question": "1+1", "answer": "2"}, {"question": "2+3", "answer": "5"}]


def write(path: Path, rows: list[dict]) -> Path:
    """Write ``rows`` in the format named by the file extension."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ext = path.suffix
    if ext == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif ext == ".json":
        path.write_text(json.dumps(rows, indent=2))
    elif ext == ".csv":
        keys = list(rows[0])
        lines = [",".join(keys)] + [",".join(str(r[k]) for k in keys) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    elif ext == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif ext == ".arrow":
        table = pa.Table.from_pylist(rows)
        with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    return path


def tagged(tag: str, n: int = 2) -> list[dict]:
    return [{"question": f"{tag}-{i}", "answer": f"a{i}"} for i in range(n)]


@pytest.mark.parametrize("ext", [".jsonl", ".json", ".csv", ".parquet", ".arrow"])
def test_single_file_of_each_format(tmp_path: Path, ext: str) -> None:
    file = write(tmp_path / f"tasks{ext}", ROWS)
    # a file path is read as is, whatever the split
    assert read_rows(str(file), split="test") == ROWS


def test_csv_values_stay_strings(tmp_path: Path) -> None:
    file = tmp_path / "t.csv"
    file.write_text('question,answer\n"say ""hi"", twice",007\n')
    assert read_rows(str(file)) == [{"question": 'say "hi", twice', "answer": "007"}]


def test_csv_row_with_wrong_field_count_names_line(tmp_path: Path) -> None:
    file = tmp_path / "train.csv"
    file.write_text("question,answer\n1+1,2\n2+2,4,extra\n")
    with pytest.raises(MalformedRowError) as err:
        read_rows(str(tmp_path))
    assert f"{file}, line 3" in str(err.value)


def test_json_file_holding_json_lines(tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    file.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert read_rows(str(file)) == ROWS


def test_blank_lines_in_jsonl_are_skipped(tmp_path: Path) -> None:
    file = tmp_path / "t.jsonl"
    file.write_text(json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[1]) + "\n   \n")
    assert read_rows(str(file)) == ROWS


# (files to write relative to the dataset dir, split, subset, the tag whose rows are expected)
LAYOUTS = {
    "split files": (["train.jsonl", "test.jsonl"], "test", None, ["test.jsonl"]),
    "subset with shards (gsm8k)": (
        [
            "main/train-00000-of-00001.parquet",
            "main/test-00000-of-00001.parquet",
            "socratic/test-00000-of-00001.parquet",
        ],
        "test",
        "main",
        ["main/test-00000-of-00001.parquet"],
    ),
    "data dir": (
        ["data/train-00000-of-00001.parquet", "data/test-00000-of-00001.parquet", "README.md"],
        "train",
        None,
        ["data/train-00000-of-00001.parquet"],
    ),
    "split dir of shards": (
        ["train/part-1.parquet", "train/part-0.parquet", "test/part-0.parquet"],
        "train",
        None,
        ["train/part-0.parquet", "train/part-1.parquet"],
    ),
    "save_to_disk": (
        ["train/data-00000-of-00001.arrow", "test/data-00000-of-00001.arrow"],
        "test",
        None,
        ["test/data-00000-of-00001.arrow"],
    ),
    "split as a word in the name": (
        ["gsm8k_train.jsonl", "gsm8k_test.jsonl", "latest.jsonl"],
        "test",
        None,
        ["gsm8k_test.jsonl"],
    ),
    "alias dev for validation": (["train.csv", "dev.csv"], "validation", None, ["dev.csv"]),
    "no split names means train": (["a.jsonl", "b.jsonl"], "train", None, ["a.jsonl", "b.jsonl"]),
    "parquet preferred over jsonl": (
        ["train.jsonl", "train.parquet"],
        "train",
        None,
        ["train.parquet"],
    ),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_directory_layouts(tmp_path: Path, layout: str) -> None:
    files, split, subset, expected = LAYOUTS[layout]
    for name in files:
        if name.endswith(".md"):
            (tmp_path / name).write_text("# card")
        else:
            write(tmp_path / name, tagged(name))
    found = find_data_files(str(tmp_path), split=split, subset_name=subset)
    assert found == [str(tmp_path / name) for name in expected]
    rows = read_rows(str(tmp_path), split=split, subset_name=subset)
    assert rows == [row for name in expected for row in tagged(name)]


def test_save_to_disk_metadata_files_are_not_rows(tmp_path: Path) -> None:
    write(tmp_path / "train" / "data-00000-of-00001.arrow", ROWS)
    (tmp_path / "train" / "state.json").write_text('{"_data_files": []}')
    (tmp_path / "train" / "dataset_info.json").write_text("{}")
    (tmp_path / "dataset_dict.json").write_text('{"splits": ["train"]}')
    assert read_rows(str(tmp_path)) == ROWS


def test_missing_path_names_path_split_and_subset(tmp_path: Path) -> None:
    missing = tmp_path / "openai" / "gsm8k"
    with pytest.raises(DatasetNotFoundError) as err:
        read_rows(str(missing), split="test", subset_name="main")
    msg = str(err.value)
    assert str(missing) in msg and "'test'" in msg and "'main'" in msg
    assert "never downloaded" in msg


def test_no_file_for_split_says_what_was_looked_for(tmp_path: Path) -> None:
    write(tmp_path / "train.jsonl", ROWS)
    with pytest.raises(DatasetNotFoundError) as err:
        read_rows(str(tmp_path), split="test")
    msg = str(err.value)
    assert "split 'test'" in msg
    assert str(tmp_path) in msg and str(tmp_path / "data") in msg
    assert "test.jsonl" in msg and "test/testing/eval/evaluation" in msg
    assert "['train.jsonl']" in msg  # what is there


def test_missing_subset_lists_subsets(tmp_path: Path) -> None:
    write(tmp_path / "main" / "train.jsonl", ROWS)
    write(tmp_path / "socratic" / "train.jsonl", ROWS)
    with pytest.raises(DatasetNotFoundError) as err:
        read_rows(str(tmp_path), subset_name="mian")
    msg = str(err.value)
    assert str(tmp_path / "mian") in msg and "['main', 'socratic']" in msg


def test_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    file = tmp_path / "train.jsonl"
    file.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps(ROWS[1]) + '\n{"question": "x",\n')
    with pytest.raises(MalformedRowError) as err:
        read_rows(str(tmp_path))
    assert f"{file}, line 3" in str(err.value)


def test_bad_json_list_names_file_and_line(tmp_path: Path) -> None:
    file = tmp_path / "train.json"
    file.write_text('[\n {"question": "a"},\n {"question": "b",}\n]')
    with pytest.raises(MalformedRowError) as err:
        read_rows(str(tmp_path))
    assert f"{file}, line 3" in str(err.value)


def test_row_that_is_not_an_object(tmp_path: Path) -> None:
    file = tmp_path / "train.jsonl"
    file.write_text(json.dumps(ROWS[0]) + "\n[1, 2]\n")
    with pytest.raises(MalformedRowError) as err:
        read_rows(str(tmp_path))
    assert f"{file}, line 2" in str(err.value) and "list" in str(err.value)


def test_missing_prompt_key_names_file_line_key_and_keys(tmp_path: Path) -> None:
    file = tmp_path / "train.jsonl"
    file.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"q": "3+4", "answer": "7"}) + "\n")
    with pytest.raises(MissingKeyError) as err:
        read_rows(str(tmp_path), required_keys={"question": "format.prompt_key"})
    msg = str(err.value)
    assert f"{file}, line 2" in msg
    assert "'question'" in msg and "format.prompt_key" in msg
    assert "['answer', 'q']" in msg


def test_missing_key_in_parquet_names_row(tmp_path: Path) -> None:
    file = write(tmp_path / "train.parquet", [{"q": "a"}, {"q": "b"}])
    with pytest.raises(MissingKeyError) as err:
        read_rows(str(tmp_path), required_keys={"question": "format.prompt_key"})
    assert f"{file}, row 0 (0-based)" in str(err.value) and "['q']" in str(err.value)


def test_corrupt_parquet_names_file(tmp_path: Path) -> None:
    file = tmp_path / "train.parquet"
    file.write_bytes(b"not a parquet file")
    with pytest.raises(MalformedRowError) as err:
        read_rows(str(tmp_path))
    assert str(file) in str(err.value) and "parquet" in str(err.value)


def test_unsupported_single_file(tmp_path: Path) -> None:
    file = tmp_path / "tasks.txt"
    file.write_text("hello")
    with pytest.raises(DatasetNotFoundError, match="not a supported data file"):
        read_rows(str(file))


def test_home_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    write(tmp_path / "ds" / "train.jsonl", ROWS)
    assert read_rows(os.path.join("~", "ds")) == ROWS


CARD = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: shards/first-*.jsonl
  - split: test
    path: shards/second-*.jsonl
- config_name: other
  data_files: shards/other.jsonl
---
"""


def test_dataset_card_configs_name_each_subsets_files(tmp_path: Path) -> None:
    # file names that carry no split: only the README's configs say which is which
    write(tmp_path / "shards" / "first-0.jsonl", tagged("first"))
    write(tmp_path / "shards" / "second-0.jsonl", tagged("second"))
    write(tmp_path / "shards" / "other.jsonl", tagged("other"))
    (tmp_path / "README.md").write_text(CARD)
    assert read_rows(str(tmp_path), split="test", subset_name="main") == tagged("second")
    assert read_rows(str(tmp_path), split="train", subset_name="main") == tagged("first")
    assert read_rows(str(tmp_path), subset_name="other") == tagged("other")
    with pytest.raises(DatasetNotFoundError, match=r"split 'test', subset 'other'"):
        read_rows(str(tmp_path), split="test", subset_name="other")


def test_a_subset_folder_beside_a_card_without_it(tmp_path: Path) -> None:
    write(tmp_path / "shards" / "other.jsonl", tagged("other"))
    write(tmp_path / "extra" / "test.jsonl", tagged("extra"))
    (tmp_path / "README.md").write_text(CARD)
    assert read_rows(str(tmp_path), split="test", subset_name="extra") == tagged("extra")
