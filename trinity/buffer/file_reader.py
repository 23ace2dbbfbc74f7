"""Rows of a local dataset (``storage_type: file``): one file or a dataset directory.

Formats: ``.jsonl``, ``.json`` (a list of objects, or JSON lines), ``.parquet``,
``.csv`` (with a header row; values stay strings, so an answer "007" is not turned
into 7) and ``.arrow`` (``datasets.save_to_disk``). Files are read with pyarrow and
the standard library only: nothing is cached and no hub is ever contacted.

A directory is resolved by ``datasets`` (``load_dataset_builder``, the first half of
``load_dataset``, which reads no data and writes only a lock file in a temporary cache
dir), so it follows the Hugging Face layouts: a ``README.md`` whose ``configs`` name each
subset's data files, split directories (``train/*.parquet``), files with a split
keyword in their name (``train-00000-of-00002.parquet``, ``gsm8k_test.jsonl``,
``dev.csv`` for ``validation``), a ``data/`` folder; without any split keyword all
files are the ``train`` split, and one format is kept when several are found.
``subset_name`` is a config of the ``README.md``, or else the folder ``<path>/<subset_name>``
(``data_dir``). A ``save_to_disk`` directory (``dataset_dict.json``/``state.json``)
reads ``<path>/<split>/*.arrow``. The files found are then read here, row by row.

A malformed row (bad JSON, not an object, a CSV line with the wrong number of fields,
a missing or wrongly typed prompt key) raises an error naming the file, the line (or
row) and the key; given an ``InvalidRows``, the reader skips and records it instead
(``skip_invalid_rows: true``). A file that cannot be parsed at all (a broken JSON
list, a corrupt parquet file) always raises.

With ``progress`` (a storage's ``enable_progress_bar``) a tqdm bar on stderr counts the
rows of each file as they are read.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from trinity.buffer.errors import (
    DatasetNotFoundError,
    InvalidRows,
    MalformedRowError,
    MissingKeyError,
)
from trinity.buffer.row_check import KeyRule, as_rules, row_problem

FORMATS = {
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".jsonl": "jsonl",
    ".json": "json",
    ".csv": "csv",
}
# files `datasets` writes next to its data; never rows
_METADATA_FILES = {"dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json"}
SPLIT_ALIASES = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test", "testing", "eval", "evaluation"),
}


def read_rows(
    path: str,
    split: str = "train",
    subset_name: str | None = None,
    required_keys: Mapping[str, str] | Iterable[KeyRule] | None = None,
    invalid: InvalidRows | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """All rows of ``split`` under ``path``, in file order.

    ``required_keys`` maps a key every row must have to the setting that names it
    (``{"question": "format.prompt_key"}``), for the error message, or is a list of
    ``KeyRule`` that also check the value's kind. A malformed row raises (naming file,
    line and key) unless ``invalid`` is given: then it is skipped and recorded there.
    ``progress``: a progress bar on stderr per file.
    """
    rows: list[dict[str, Any]] = []
    for file in find_data_files(path, split, subset_name):
        rows.extend(read_file(file, required_keys, invalid, progress))
    return rows


def with_progress(items: list, what: str, shown: bool) -> Iterable:
    """``items``, counted by a tqdm bar on stderr (``reading <what>``) when ``shown``."""
    if not shown:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=f"reading {what}", unit=" rows", file=sys.stderr)


def find_data_files(path: str, split: str = "train", subset_name: str | None = None) -> list[str]:
    """The data files of ``split`` (sorted), or DatasetNotFoundError saying what was looked for."""
    path = os.path.expanduser(path)
    where = f"split '{split}'" + (f", subset '{subset_name}'" if subset_name else "")
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise DatasetNotFoundError(
            f"dataset path '{path}' ({where}) does not exist. Datasets are never downloaded "
            "from a hub: copy the dataset into a local directory and point `path` at it"
        )
    root = os.path.join(path, subset_name) if subset_name else path
    if os.path.isfile(os.path.join(root, "state.json")):  # one Dataset saved: no splits
        found = {"train": _data_files(root)}
    elif os.path.isfile(os.path.join(root, "dataset_dict.json")):  # a saved DatasetDict
        found = {split: _data_files(os.path.join(root, split))}
    else:
        found = _hf_layout(path, subset_name, where)
    if found.get(split):
        return found[split]
    names = "/".join(_split_names(split))
    raise DatasetNotFoundError(
        f"no data file for {where} under '{path}'. Looked in '{root}' and "
        f"'{os.path.join(root, 'data')}' (Hugging Face layouts) "
        f"for a '{split}/' directory or files with '{names}' as a word in their name (e.g. "
        f"{split}.jsonl, {split}-00000-of-00001.parquet), formats {', '.join(FORMATS)}. "
        f"Splits found: {sorted(found)}; files in '{root}': {_listing(root, dirs=False)}"
    )


def _hf_layout(path: str, subset_name: str | None, where: str) -> dict[str, list[str]]:
    """Split -> data files, as ``datasets.load_dataset(path, subset_name)`` would read them.

    ``subset_name`` is a config of the dataset card (``README.md``) when it lists one by
    that name, else the folder ``<path>/<subset_name>``.
    """
    import tempfile

    from datasets import load_dataset_builder

    def resolve(folder: str, name: str | None = None) -> dict[str, list[str]]:
        # the builder takes a lock file in its cache dir; keep that out of the user's cache
        with tempfile.TemporaryDirectory(prefix="trinity-datasets-") as cache_dir:
            builder = load_dataset_builder(os.path.abspath(folder), name, cache_dir=cache_dir)
        return {str(split): sorted(files) for split, files in builder.config.data_files.items()}

    try:
        if not subset_name:
            return resolve(path)
        try:
            return resolve(path, subset_name)
        except (FileNotFoundError, ValueError):  # not a config of the dataset card
            folder = os.path.join(path, subset_name)
            if not os.path.isdir(folder):
                raise DatasetNotFoundError(
                    f"no subset directory '{folder}' for {where} and no config of that name "
                    f"in '{path}/README.md'; subdirectories of '{path}': "
                    f"{_listing(path, dirs=True)}"
                ) from None
        # the folder as a dataset of its own (a card's configs above it would apply otherwise)
        return resolve(folder)
    except DatasetNotFoundError:
        raise
    except (FileNotFoundError, ValueError) as exc:  # no data files, or formats disagree
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatasetNotFoundError(
            f"no readable data files for {where} under '{path}' ({first}); formats "
            f"{', '.join(FORMATS)}. Files in '{path}': {_listing(path, dirs=False)}"
        ) from None


def read_file(
    file: str,
    required_keys: Mapping[str, str] | Iterable[KeyRule] | None = None,
    invalid: InvalidRows | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Rows of one data file, each checked against ``required_keys`` (see ``read_rows``)."""
    fmt = FORMATS.get(os.path.splitext(file)[1].lower())
    if fmt is None:
        raise DatasetNotFoundError(
            f"'{file}' is not a supported data file; use one of {', '.join(FORMATS)}"
        )
    if fmt in ("jsonl", "json"):
        located = _read_json(file, fmt)
    elif fmt == "csv":
        located = _read_csv(file)
    else:
        located = [
            (f"row {i} (0-based)", row, None) for i, row in enumerate(_read_table(file, fmt))
        ]
    rules = as_rules(required_keys)
    rows = []
    for where, row, problem in with_progress(located, file, progress):
        error: Exception | None = None
        if problem is not None:
            error = MalformedRowError(f"{file}, {where}: {problem}")
        else:
            for rule in rules:
                found = row_problem(row, rule)
                if found is not None:
                    message, missing = found
                    text = f"{file}, {where}: {message}"
                    error = MissingKeyError(text) if missing else MalformedRowError(text)
                    break
        if error is None:
            rows.append(row)
        elif invalid is None:
            raise error
        else:
            invalid.record(str(error))
    return rows


# (where, row, problem): a row that cannot be parsed has row None and says why
Located = list[tuple[str, Any, str | None]]


def _read_json(file: str, fmt: str) -> Located:
    with open(file, encoding="utf-8") as f:
        text = f.read()
    if fmt == "json" and text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MalformedRowError(
                f"{file}, line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg})"
            ) from None
        if not isinstance(items, list):
            raise MalformedRowError(f"{file}: expected a JSON list of objects")
        located: Located = [(f"element {i} (0-based)", item, None) for i, item in enumerate(items)]
    else:
        # JSON lines; a .json file holding one object per line is read the same way
        located = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                located.append((f"line {number}", json.loads(line), None))
            except json.JSONDecodeError as exc:
                located.append(
                    (f"line {number} column {exc.colno}", None, f"invalid JSON ({exc.msg})")
                )
    return [
        (where, item, problem)
        if problem is not None or isinstance(item, dict)
        else (where, None, f"expected a JSON object per row, got {type(item).__name__}")
        for where, item, problem in located
    ]


def _read_csv(file: str) -> Located:
    located: Located = []
    with open(file, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            # DictReader files surplus fields under None and fills missing ones with None
            if None in row or None in row.values():
                problem = (
                    f"the row has a different number of fields than the header {reader.fieldnames}"
                )
                located.append((f"line {reader.line_num}", None, problem))
            else:
                located.append((f"line {reader.line_num}", row, None))
    return located


def _read_table(file: str, fmt: str) -> list[dict[str, Any]]:
    import pyarrow as pa  # imported here: reading JSON lines needs none of it

    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(file)
        else:
            table = _read_arrow(file)
    except (pa.ArrowException, OSError) as exc:
        raise MalformedRowError(f"{file}: cannot read as {fmt} ({exc})") from exc
    return table.to_pylist()


def _read_arrow(file: str) -> Any:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    # `datasets.save_to_disk` writes the streaming format; other tools write the file format
    try:
        with pa.memory_map(file) as source:
            return ipc.open_stream(source).read_all()
    except pa.ArrowInvalid:
        with pa.memory_map(file) as source:
            return ipc.open_file(source).read_all()


def _split_names(split: str) -> list[str]:
    return [split] + [a for a in SPLIT_ALIASES.get(split, ()) if a != split]


def _is_data_file(name: str) -> bool:
    return (
        not name.startswith(".")
        and name not in _METADATA_FILES
        and os.path.splitext(name)[1].lower() in FORMATS
    )


def _data_files(folder: str) -> list[str]:
    if not os.path.isdir(folder):
        return []
    return sorted(
        os.path.join(folder, name)
        for name in os.listdir(folder)
        if _is_data_file(name) and os.path.isfile(os.path.join(folder, name))
    )


def _listing(folder: str, dirs: bool) -> list[str]:
    if not os.path.isdir(folder):
        return []
    return sorted(
        name
        for name in os.listdir(folder)
        if os.path.isdir(os.path.join(folder, name)) == dirs and not name.startswith(".")
    )
