"""Experience and task storage in any SQLAlchemy database (SQLite by default).

A path without a URL scheme becomes ``sqlite:///<path>`` and its parent directories
are created. SQLite runs in WAL mode so readers (the trainer, a notebook) never block
the writer, with ``synchronous=NORMAL`` (a killed process loses nothing committed). Each ``write`` is one transaction: a crash loses at most the batch being
written and never leaves a half-written batch behind.

PostgreSQL works through its URL (``postgresql+psycopg://user:pw@host/db``). Two
details keep it equivalent to SQLite:

- ``read_new`` follows increasing ids, so ids must become visible in increasing order.
  SQLite's single write lock gives that for free; on PostgreSQL two transactions could
  commit their sequence numbers out of order, so each write takes the table's
  EXCLUSIVE lock (readers are not blocked by it).
- PostgreSQL's JSON rejects NaN and infinities, which Python writes as bare tokens;
  in ``info``/``metrics``/``messages`` they are stored as ``{"$float": "nan"}``
  (``"inf"``, ``"-inf"``) and turned back into floats when read.

PostgreSQL connections give up instead of hanging: ``connect_timeout`` (seconds,
default 10; libpq counts whole seconds, at least 2) bounds opening a connection, and
``lock_timeout`` (default 10) bounds the wait for a lock another transaction holds
(the table lock of a write, or of a tool that locked the table). Either one raises
``StorageTimeout``, one line naming the server and the key.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine, Table, create_engine, event, func, inspect, select, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from trinity.buffer.codec import check_json
from trinity.buffer.errors import InvalidRows, MalformedRowError, StorageTimeout
from trinity.buffer.media_store import (
    MediaCache,
    distinct_media,
    media_from_bytes,
    media_to_bytes,
)
from trinity.buffer.schema import (
    EXPERIENCE_TABLE,
    TASK_TABLE,
    Base,
    experience_model,
    media_model,
    task_model,
)
from trinity.buffer.superseded import Superseded
from trinity.config.schema.buffer import CONNECT_TIMEOUT, LOCK_TIMEOUT
from trinity.rollout.multimodal import MediaInputs
from trinity.types import Experience

LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE of a lock_timeout


def database_url(url_or_path: str) -> str:
    """``sqlite:///abs/path`` for a plain path; a URL (``scheme://...``) unchanged."""
    if "://" in url_or_path:
        return url_or_path
    return f"sqlite:///{os.path.abspath(os.path.expanduser(url_or_path))}"


def open_engine(
    url_or_path: str,
    connect_timeout: float = CONNECT_TIMEOUT,
    lock_timeout: float = LOCK_TIMEOUT,
) -> Engine:
    """An engine for ``url_or_path``; SQLite files get WAL mode and a busy timeout,
    PostgreSQL its ``connect_timeout`` and ``lock_timeout`` (seconds, see the module doc)."""
    for key, value in (("connect_timeout", connect_timeout), ("lock_timeout", lock_timeout)):
        if not value > 0:
            raise ValueError(f"{key} must be > 0 seconds, got {value}")
    url = make_url(database_url(url_or_path))
    if url.get_backend_name() == "postgresql":
        # libpq counts whole seconds, at least 2; lock_timeout is in milliseconds
        options = f"{url.query.get('options', '')} -c lock_timeout={math.ceil(lock_timeout * 1000)}"
        engine = create_engine(
            url,
            pool_pre_ping=True,
            json_serializer=_pg_json_dumps,
            json_deserializer=_pg_json_loads,
            connect_args={
                "connect_timeout": max(2, math.ceil(connect_timeout)),
                "options": options.strip(),
            },
        )
        event.listen(engine, "handle_error", _timeout_error(url, connect_timeout, lock_timeout))
        return engine
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if url.database and url.database != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(url.database)), exist_ok=True)
    # several threads (queue writers, readers) share the engine; SQLite serializes them,
    # and the busy timeout makes a second process wait for the lock instead of failing
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 60})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # in WAL mode NORMAL still survives a killed process; only an OS crash or power
        # loss can drop the last commits, and it is several times faster than FULL
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return engine


def _timeout_error(url: URL, connect_timeout: float, lock_timeout: float) -> Any:
    """A ``handle_error`` hook raising StorageTimeout, naming the key, when one fires."""
    where = f"PostgreSQL {url.render_as_string(hide_password=True)}"

    def on_error(context: Any) -> None:
        error = context.original_exception
        if type(error).__name__ == "ConnectionTimeout" or "timeout expired" in str(error):
            raise StorageTimeout(
                f"{where}: no connection within connect_timeout={connect_timeout:g} s; "
                "check that the server is up and reachable, or raise connect_timeout"
            ) from error
        if getattr(error, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            statement = " ".join((context.statement or "").split())[:80]
            raise StorageTimeout(
                f"{where}: a lock held by another transaction was not granted within "
                f"lock_timeout={lock_timeout:g} s ({statement}); raise lock_timeout, or end "
                "the transaction that holds it"
            ) from error

    return on_error


def create_table(engine: Engine, table: Table) -> None:
    """Create ``table`` unless it exists, also when other processes race to create it;
    an existing table gains the nullable columns it lacks (see ``add_missing_columns``)."""
    try:
        Base.metadata.create_all(engine, tables=[table])
    except DBAPIError:
        # another writer created it between our existence check and CREATE TABLE
        if not inspect(engine).has_table(table.name):
            raise
    add_missing_columns(engine, table)


def add_missing_columns(engine: Engine, table: Table) -> None:
    """Add to an existing ``table`` the nullable columns of its model it lacks.

    A table written before a field joined the schema (``teacher_logprobs``) would
    otherwise fail every read; its old rows read the new column as NULL (None).
    """
    present = {c["name"] for c in inspect(engine).get_columns(table.name)}
    missing = [c for c in table.columns if c.name not in present and c.nullable]
    if not missing:
        return
    preparer = engine.dialect.identifier_preparer
    for column in missing:
        kind = column.type.compile(dialect=engine.dialect)
        statement = text(
            f"ALTER TABLE {preparer.format_table(table)} "
            f"ADD COLUMN {preparer.format_column(column)} {kind}"
        )
        try:
            with engine.begin() as conn:
                conn.execute(statement)
        except DBAPIError:
            # another process added it between our look and the ALTER
            if column.name not in {c["name"] for c in inspect(engine).get_columns(table.name)}:
                raise


_FLOAT_TAG = "$float"
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _tag_nonfinite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return {_FLOAT_TAG: "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, dict):
        return {k: _tag_nonfinite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tag_nonfinite(v) for v in value]
    return value


def _untag_nonfinite(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and obj.get(_FLOAT_TAG) in _NONFINITE:
        return _NONFINITE[obj[_FLOAT_TAG]]
    return obj


def _pg_json_dumps(value: Any) -> str:
    return json.dumps(_tag_nonfinite(value), allow_nan=False)


def _pg_json_loads(data: str) -> Any:
    return json.loads(data, object_hook=_untag_nonfinite)


class SQLExperienceStorage:
    """Append-only experience table with an id cursor for incremental reads."""

    def __init__(
        self,
        url_or_path: str,
        table_name: str = EXPERIENCE_TABLE,
        skip_invalid: bool = False,
        connect_timeout: float = CONNECT_TIMEOUT,
        lock_timeout: float = LOCK_TIMEOUT,
    ) -> None:
        self.url = database_url(url_or_path)
        self.table_name = table_name
        self.skip_invalid = skip_invalid
        self.invalid = InvalidRows()  # undecodable rows skipped by read_new
        self.model = experience_model(table_name)
        self.media_model = media_model(table_name)
        self.media_cache = MediaCache()
        self.engine = open_engine(url_or_path, connect_timeout, lock_timeout)
        create_table(self.engine, self.model.__table__)
        self._media_table_ready = False  # created by the first write with images
        self._cursor = 0  # largest id handed out by read_new
        self._superseded: Superseded | None = None  # rows read_new skips (a resume)
        # one writer at a time inside a process; SQLite would otherwise retry on its lock
        self._write_lock = threading.Lock()
        self._cursor_lock = threading.Lock()  # two read_new calls must not share rows

    def write(self, exps: Iterable[Experience]) -> list[int]:
        """Append ``exps`` in one transaction (all or nothing); returns their row ids."""
        exps = list(exps)
        rows = [self.model.from_experience(exp) for exp in exps]
        if not rows:
            return []
        media = distinct_media(exps)
        if media and not self._media_table_ready:
            create_table(self.engine, self.media_model.__table__)
            self._media_table_ready = True
        with self._write_lock, Session(self.engine) as sess, sess.begin():
            if self.engine.dialect.name == "postgresql":
                sess.execute(text(f"LOCK TABLE {self._quoted_table} IN EXCLUSIVE MODE"))
            if media:
                self._add_media(sess, media)
            sess.add_all(rows)
            sess.flush()
            return [row.id for row in rows]

    @property
    def _quoted_table(self) -> str:
        return self.engine.dialect.identifier_preparer.format_table(self.model.__table__)

    def read(self, n: int, offset: int = 0) -> list[Experience]:
        """Up to ``n`` experiences in insertion order, skipping the first ``offset``."""
        stmt = select(self.model).order_by(self.model.id).offset(offset).limit(n)
        with Session(self.engine) as sess:
            return self._decode(sess.scalars(stmt), InvalidRows())

    def read_new(self, n: int) -> list[Experience]:
        """Up to ``n`` experiences written after the last ones ``read_new`` returned
        (less the superseded rows of a resume, see ``discard_stored``)."""
        stmt = select(self.model).order_by(self.model.id)
        out: list[Experience] = []
        with self._cursor_lock, Session(self.engine) as sess:
            while len(out) < n:
                rows = list(
                    sess.scalars(stmt.where(self.model.id > self._cursor).limit(n - len(out)))
                )
                if not rows:
                    break
                self._cursor = rows[-1].id
                skip = self._superseded
                if skip is not None:
                    rows = [r for r in rows if not skip.skips(r.id, r.eid_batch)]
                out += self._decode(rows, self.invalid)
        return out

    def read_at(self, ids: Iterable[int]) -> dict[int, Experience]:
        """The experiences of the rows ``ids`` (as ``write`` returned them), by id; rows
        that are gone or cannot be decoded are left out."""
        ids = list(ids)
        found: dict[int, Experience] = {}
        with Session(self.engine) as sess:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                for row in sess.scalars(select(self.model).where(self.model.id.in_(chunk))):
                    found.update((row.id, exp) for exp in self._decode([row], InvalidRows()))
        return found

    def discard_stored(self, after_step: int | None) -> None:
        """Never return the rows stored now past the read position from explore steps
        after ``after_step`` (None: any step); see ``trinity.buffer.superseded``."""
        with self._cursor_lock, Session(self.engine) as sess:
            last = sess.scalar(select(func.max(self.model.id))) or 0
            self._superseded = Superseded(end=int(last) + 1, step=after_step)

    def _add_media(self, sess: Session, media: dict[str, MediaInputs]) -> None:
        """Store the media not stored yet (one row per digest, however many rollouts)."""
        table = self.media_model
        stored = set(sess.scalars(select(table.digest).where(table.digest.in_(list(media)))))
        for digest, item in media.items():
            if digest not in stored:
                blob, meta = media_to_bytes(item)
                sess.add(table(digest=digest, tensors=blob, tensor_meta=meta))

    def _media(self, digest: str) -> MediaInputs:
        cached = self.media_cache.get(digest)
        if cached is not None:
            return cached
        with Session(self.engine) as sess:
            row = sess.get(self.media_model, digest)
            if row is None:
                raise KeyError(f"media {digest} (the experience's images) is not stored")
            return self.media_cache.put(media_from_bytes(row.tensors, row.tensor_meta, digest))

    def _decode(self, rows: Iterable[Any], invalid: InvalidRows) -> list[Experience]:
        out = []
        for row in rows:
            try:
                exp = row.to_experience()
                if row.media_digest:
                    exp.media = self._media(row.media_digest)
                out.append(exp)
            # a row written by other tools: bad tensor_meta, byte count or JSON shape
            except (ValueError, KeyError, TypeError, AttributeError, RuntimeError) as exc:
                message = (
                    f"{self.url}, table '{self.table_name}', row id {row.id}: not a stored "
                    f"experience ({type(exc).__name__}: {exc})"
                )
                if not self.skip_invalid:
                    raise MalformedRowError(message) from exc
                invalid.record(message)
        return out

    def count(self) -> int:
        with Session(self.engine) as sess:
            return int(sess.scalar(select(func.count()).select_from(self.model)) or 0)

    def state_dict(self) -> dict[str, Any]:
        return {"cursor": self._cursor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._cursor = int(state["cursor"])

    def close(self) -> None:
        self.engine.dispose()


class SQLTaskStorage:
    """A taskset stored as one JSON row per task (``storage_type: sql``)."""

    def __init__(
        self,
        url_or_path: str,
        table_name: str = TASK_TABLE,
        connect_timeout: float = CONNECT_TIMEOUT,
        lock_timeout: float = LOCK_TIMEOUT,
    ) -> None:
        self.url = database_url(url_or_path)
        self.table_name = table_name
        self.model = task_model(table_name)
        self.engine = open_engine(url_or_path, connect_timeout, lock_timeout)
        create_table(self.engine, self.model.__table__)

    def write_rows(self, rows: Iterable[dict[str, Any]]) -> None:
        """Append taskset rows in one transaction."""
        models = [self.model(raw=check_json(dict(row), "task row")) for row in rows]
        with Session(self.engine) as sess, sess.begin():
            sess.add_all(models)

    def read_rows(self) -> list[dict[str, Any]]:
        """Every row, in insertion order."""
        with Session(self.engine) as sess:
            return [row.raw for row in sess.scalars(select(self.model).order_by(self.model.id))]

    def close(self) -> None:
        self.engine.dispose()
