"""Rows of a folder taskset (``storage_type: task_dir``): one task per sub-directory.

For benchmarks whose every task is a directory of its own (an instruction, tests, a
container recipe: Harbor-style tasks), the reader reads nothing inside them: each task
row names its directory and the workflow parses it. A row, as Trinity-RFT's reader
makes it::

    {"task_id": "<taskset>:<i>:<dir name>", "task_name": "<dir name>",
     "task_dir": "<absolute path>", "taskset_name": "<taskset>", "source_type": "task_dir"}

The tasks are the sub-directories of ``path`` whose name does not start with ``.``, in
name order; or, when ``path/index.txt`` exists, the folders it lists, one relative path
per line, in its order (blank lines and lines starting with ``#`` skipped).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity.buffer.errors import DatasetNotFoundError, MalformedRowError

INDEX_FILE = "index.txt"


def task_dir_rows(path: str, taskset_name: str) -> list[dict[str, Any]]:
    """One row per task directory under ``path`` (see the module docstring)."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise DatasetNotFoundError(
            f"taskset '{taskset_name}': task_dir path '{path}' is not a directory "
            "(storage_type task_dir reads one task per sub-directory)"
        )
    index = root / INDEX_FILE
    if index.is_file():
        folders = _indexed(root, index)
    else:
        folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    return [
        {
            "task_id": f"{taskset_name}:{i}:{folder.name}",
            "task_name": folder.name,
            "task_dir": str(folder),
            "taskset_name": taskset_name,
            "source_type": "task_dir",
        }
        for i, folder in enumerate(folders)
    ]


def _indexed(root: Path, index: Path) -> list[Path]:
    folders = []
    for number, line in enumerate(index.read_text(encoding="utf-8").splitlines(), start=1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        where = f"{index}, line {number}: '{entry}'"
        relative = Path(entry)
        if relative.is_absolute() or ".." in relative.parts:
            raise MalformedRowError(
                f"{where} must be a folder relative to {root} and inside it "
                "(no absolute path, no '..')"
            )
        folder = (root / relative).resolve()
        if not folder.is_dir():
            raise DatasetNotFoundError(f"{where} is not a directory under {root}")
        folders.append(folder)
    return folders
