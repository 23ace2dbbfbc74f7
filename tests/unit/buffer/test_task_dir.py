"""``storage_type: task_dir``: a directory whose sub-directories are the tasks."""

from __future__ import annotations

from pathlib import Path

import pytest
from buffer_testing import storage_config

from trinity.buffer import TasksetReader
from trinity.buffer.errors import DatasetNotFoundError, MalformedRowError


def task_dirs(root: Path, *names: str) -> Path:
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / "instruction.md").write_text(f"solve {name}\n")
    return root


def reader(root: Path, **kwargs) -> TasksetReader:
    cfg = storage_config(name="folders", storage_type="task_dir", path=str(root))
    # countdown_workflow builds its own prompt, so rows need no prompt column
    return TasksetReader(cfg, default_workflow="countdown_workflow", **kwargs)


def test_each_subdirectory_is_one_task_in_name_order(tmp_path: Path) -> None:
    root = task_dirs(tmp_path / "tasks", "task-b", "task-a", ".hidden")
    (root / "notes.txt").write_text("a file, not a task")
    r = reader(root, batch_size=2)
    assert r.num_tasks == 2  # .hidden and the plain file are not tasks
    first, second = r.read_batch()
    assert first.raw == {
        "task_id": "folders:0:task-a",
        "task_name": "task-a",
        "task_dir": str((root / "task-a").resolve()),
        "taskset_name": "folders",
        "source_type": "task_dir",
    }
    assert Path(first.raw["task_dir"]).is_absolute()
    assert (second.raw["task_name"], second.index) == ("task-b", 1)


def test_index_txt_chooses_and_orders_the_tasks(tmp_path: Path) -> None:
    root = task_dirs(tmp_path / "tasks", "task-a", "task-b", "task-c", "group/task-d")
    (root / "index.txt").write_text(
        "# one task folder per line\ntask-b\n\n  group/task-d \ntask-a\n"
    )
    tasks = reader(root, batch_size=3).read_batch()
    assert [t.raw["task_name"] for t in tasks] == ["task-b", "task-d", "task-a"]
    assert tasks[1].raw["task_id"] == "folders:1:task-d"


@pytest.mark.parametrize(
    ("index", "error", "match"),
    [
        ("task-a\n../outside\n", MalformedRowError, r"index\.txt, line 2: '\.\./outside'"),
        ("task-a\n/abs\n", MalformedRowError, r"index\.txt, line 2: '/abs'"),
        ("task-a\ntask-z\n", DatasetNotFoundError, r"index\.txt, line 2: 'task-z' is not a dir"),
    ],
)
def test_a_bad_index_line_is_named(tmp_path: Path, index: str, error: type, match: str) -> None:
    root = task_dirs(tmp_path / "tasks", "task-a")
    (root / "index.txt").write_text(index)
    with pytest.raises(error, match=match):
        reader(root, batch_size=1)


def test_a_missing_or_empty_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="is not a directory"):
        reader(tmp_path / "nowhere", batch_size=1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no rows"):
        reader(tmp_path / "empty", batch_size=1)


def test_a_workflow_that_reads_a_prompt_column_is_refused(tmp_path: Path) -> None:
    cfg = storage_config(name="folders", storage_type="task_dir", path=str(tmp_path))
    with pytest.raises(ValueError, match="workflow 'math_workflow' reads a prompt column"):
        TasksetReader(cfg, batch_size=1, default_workflow="math_workflow")
