"""Experiences of a run, page by page, for ``trinity view``.

A source is a SQL database (a SQLite file or any SQLAlchemy URL; table ``experience``
unless told otherwise) or a JSON-lines file of experiences. Rows are decoded with the
buffer's own codecs: nothing is unpickled. A JSON-lines file is paged through its index
of line offsets (``line_index.py``), so a page decodes only its own lines. A row that is
not a stored experience (bad JSON, a tensor of the wrong size, a reward that is not a
number) comes back in its place as a ``RowProblem`` with a one-line message, so one bad
row never hides the others. With a tokenizer, each response token is shown as text next
to its log-probability; without one, as its id.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import inspect, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from trinity.buffer.codec import experience_from_dict
from trinity.buffer.schema import EXPERIENCE_TABLE
from trinity.buffer.sql_storage import SQLExperienceStorage, open_engine
from trinity.types import Experience
from trinity.view.line_index import LineIndex

# what decoding a row that is not a stored experience raises (JSON, codec, torch's shape
# check, a reward or model_version that is not a number); RecursionError is a RuntimeError
MALFORMED = (ValueError, KeyError, TypeError, AttributeError, RuntimeError)
# the largest row offset SQL takes (a 64-bit integer); a larger one is past every table
MAX_OFFSET = 2**63 - 1


@dataclass
class TokenView:
    """One response token: its id, text, log-probability, and whether it is trained on."""

    id: int
    text: str
    logprob: float | None
    trained: bool
    advantage: float | None


@dataclass
class ExperienceView:
    """What the viewer shows of one experience (position ``index`` in the source)."""

    index: int
    eid: str
    model_version: int
    reward: float | None
    prompt: str
    response: str
    tokens: list[TokenView]
    prompt_length: int
    metrics: dict[str, Any]
    info: dict[str, Any]
    # the prompt's images as its messages keep them: data URLs (thumbnails) or paths
    images: list[str] = field(default_factory=list)

    @property
    def mean_logprob(self) -> float | None:
        values = [t.logprob for t in self.tokens if t.logprob is not None]
        return sum(values) / len(values) if values else None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "eid": self.eid,
            "model_version": self.model_version,
            "reward": _json_float(self.reward),
            "prompt": self.prompt,
            "response": self.response,
            "prompt_length": self.prompt_length,
            "tokens": [
                {
                    "id": t.id,
                    "text": t.text,
                    "logprob": _json_float(t.logprob),
                    "trained": t.trained,
                    "advantage": _json_float(t.advantage),
                }
                for t in self.tokens
            ],
            "metrics": json_safe(self.metrics),
            "info": json_safe(self.info),
            "images": list(self.images),
        }


@dataclass
class RowProblem:
    """Row ``index`` of the source, which is not a stored experience: ``message`` says
    where (file and line, or table and row id) and why, in one line."""

    index: int
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "error": self.message}


Row = ExperienceView | RowProblem


class ViewSourceError(ValueError):
    """The path given to ``trinity view`` holds no experiences it can read."""


class ExperienceSource:
    """Pages of experiences from a database or a JSON-lines file."""

    def __init__(
        self,
        path: str,
        table: str = EXPERIENCE_TABLE,
        decode: Callable[[list[int]], list[str]] | None = None,
    ) -> None:
        self.path = path
        self.decode = decode
        self._storage: SQLExperienceStorage | None = None
        self._lines: LineIndex | None = None
        if path.endswith((".jsonl", ".json")) and "://" not in path:
            if not os.path.isfile(path):
                raise ViewSourceError(f"no experience file at '{path}'")
            self._lines = LineIndex(path)
        else:
            if "://" not in path and not os.path.isfile(path):
                raise ViewSourceError(
                    f"no database at '{path}'; give a SQLite file, a SQLAlchemy URL, or a .jsonl file"
                )
            with _database_errors(path):
                _check_table(path, table)
                self._storage = SQLExperienceStorage(path, table_name=table)

    def count(self) -> int:
        """The number of rows; raises ViewSourceError when the source cannot be read."""
        if self._storage is not None:
            with _database_errors(self.path):
                return self._storage.count()
        assert self._lines is not None
        try:
            return self._lines.refresh()  # the file may still be growing while a run writes it
        except OSError as exc:
            raise ViewSourceError(f"cannot read '{self.path}': {exc.strerror or exc}") from exc

    def page(self, offset: int, limit: int) -> list[Row]:
        """Rows ``offset`` to ``offset + limit - 1`` (fewer past the end; a negative
        offset reads from 0), each an ``ExperienceView`` or, where the row is not a
        stored experience, a ``RowProblem``."""
        offset, limit = max(0, offset), max(0, limit)
        if offset > MAX_OFFSET or limit == 0:
            return []
        if self._storage is not None:
            with _database_errors(self.path):
                return list(self._sql_rows(offset, limit))
        try:
            return list(self._jsonl_rows(offset, limit))
        except OSError as exc:
            raise ViewSourceError(f"cannot read '{self.path}': {exc.strerror or exc}") from exc

    def _jsonl_rows(self, offset: int, limit: int) -> Iterator[Row]:
        assert self._lines is not None
        self._lines.refresh()
        for index, (number, raw) in enumerate(self._lines.lines(offset, limit), start=offset):
            try:
                obj = json.loads(raw)
                if not isinstance(obj, dict):
                    raise TypeError(f"expected a JSON object, got {type(obj).__name__}")
                yield self.view(index, experience_from_dict(obj))
            except MALFORMED as exc:
                where = f"{self.path}, line {number}"
                yield RowProblem(index, f"{where}: not a stored experience ({_describe(exc)})")

    def _sql_rows(self, offset: int, limit: int) -> Iterator[Row]:
        # the ids first, then each row on its own: a column that does not decode (JSON
        # that is not JSON) fails while its row is fetched, and only that row
        storage = self._storage
        assert storage is not None
        model = storage.model
        ids = select(model.id).order_by(model.id).offset(offset).limit(limit)
        with Session(storage.engine) as sess:
            for index, row_id in enumerate(list(sess.scalars(ids)), start=offset):
                try:
                    row = sess.scalars(select(model).where(model.id == row_id)).one()
                    yield self.view(index, row.to_experience())
                except MALFORMED as exc:
                    where = f"{storage.url}, table '{storage.table_name}', row id {row_id}"
                    yield RowProblem(index, f"{where}: not a stored experience ({_describe(exc)})")

    def view(self, index: int, exp: Experience) -> ExperienceView:
        """What the viewer shows of ``exp``; raises one of ``MALFORMED`` for values no
        stored experience holds (a reward that is not a number, tokens that are not ids)."""
        response_ids = [int(t) for t in exp.response_tokens.tolist()]
        texts = self.decode(response_ids) if self.decode else [f"<{t}>" for t in response_ids]
        logprobs = _values(exp.logprobs, len(response_ids))
        mask = _values(exp.action_mask, len(response_ids))
        advantages = _values(exp.advantages, len(response_ids))
        tokens = [
            TokenView(
                id=tid,
                text=texts[i],
                logprob=None if logprobs[i] is None else float(logprobs[i]),
                trained=True if mask[i] is None else bool(mask[i]),
                advantage=None if advantages[i] is None else float(advantages[i]),
            )
            for i, tid in enumerate(response_ids)
        ]
        prompt = exp.prompt_text
        if prompt is None and exp.messages:
            prompt = "\n".join(f"[{m.get('role')}] {m.get('content')}" for m in exp.messages)
        if prompt is None:
            prompt_ids = [int(t) for t in exp.tokens[: exp.prompt_length].tolist()]
            prompt = "".join(self.decode(prompt_ids)) if self.decode else str(prompt_ids)
        response = exp.response_text
        if response is None:
            response = "".join(texts) if self.decode else str(response_ids)
        return ExperienceView(
            index=index,
            eid=str(exp.eid),
            model_version=_number("model_version", exp.model_version, int),
            reward=None if exp.reward is None else _number("reward", exp.reward, float),
            prompt=prompt,
            response=response,
            tokens=tokens,
            prompt_length=_number("prompt_length", exp.prompt_length, int),
            metrics=dict(exp.metrics),
            info={k: v for k, v in exp.info.items() if k != "model_version"},
            images=message_images(exp.messages),
        )

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()


@contextlib.contextmanager
def _database_errors(path: str) -> Iterator[None]:
    """A database that cannot be read at all (not a database, columns of another
    table) as a one-line ViewSourceError instead of SQLAlchemy's traceback."""
    try:
        yield
    except SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc
        first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise ViewSourceError(f"cannot read the database '{path}': {first}") from exc


def message_images(messages: list[dict[str, Any]] | None) -> list[str]:
    """The image references (data URLs or paths) of ``messages``' image parts."""
    found = []
    for message in messages or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "image" and part.get("image"):
                found.append(str(part["image"]))
    return found


def _check_table(path: str, table: str) -> None:
    """Refuse a database without ``table``, which the storage would otherwise create empty."""
    engine = open_engine(path)
    try:
        if not inspect(engine).has_table(table):
            names = inspect(engine).get_table_names()
            raise ViewSourceError(
                f"no table '{table}' in '{path}'; its tables: {names or 'none'} (choose one with --table)"
            )
    finally:
        engine.dispose()


def tokenizer_decoder(tokenizer_path: str) -> Callable[[list[int]], list[str]]:
    """Per-token texts from a local tokenizer directory (transformers)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)

    def decode(ids: list[int]) -> list[str]:
        return [tokenizer.decode([i]) for i in ids]

    return decode


def _number(name: str, value: Any, kind: type[int] | type[float]) -> Any:
    try:
        return kind(value)
    except (TypeError, ValueError) as exc:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{name} is {value!r}, not {what}") from exc


def _describe(exc: BaseException) -> str:
    """``exc`` in one line of at most 300 characters."""
    text = f"missing key {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:299] + "\u2026"


def _values(tensor: Any, n: int) -> list[Any]:
    """``n`` values from a 1-D tensor (None where it is missing or too short)."""
    if tensor is None:
        return [None] * n
    flat = tensor.reshape(-1).tolist()
    return [flat[i] if i < len(flat) else None for i in range(n)]


def _json_float(x: float | None) -> float | str | None:
    if x is None or math.isfinite(x):
        return x
    return str(x)  # JSON has no NaN/inf


def json_safe(value: Any) -> Any:
    """``value`` with NaN/inf floats as strings, so browsers can parse the JSON."""
    if isinstance(value, float):
        return _json_float(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
