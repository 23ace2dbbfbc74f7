"""Experience and task storage in any SQLAlchemy database (SQLite by default).

A path without a URL scheme becomes ``sqlite:///<path>`` and its parent directories
are created. SQLite runs in WAL mode so readers (the trainer, a notebook) never block
the writer. Each ``write`` is one transaction: a crash loses at most the batch being
written and never leaves a half-written batch behind.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine, create_engine, event, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from trinity.buffer.codec import check_json
from trinity.buffer.schema import (
    EXPERIENCE_TABLE,
    TASK_TABLE,
    Base,
    experience_model,
    task_model,
)
from trinity.types import Experience


def database_url(url_or_path: str) -> str:
    """``sqlite:///abs/path`` for a plain path; a URL (``scheme://...``) unchanged."""
    if "://" in url_or_path:
        return url_or_path
    return f"sqlite:///{os.path.abspath(os.path.expanduser(url_or_path))}"


def open_engine(url_or_path: str) -> Engine:
    """An engine for ``url_or_path``; SQLite files get WAL mode and a busy timeout."""
    url = make_url(database_url(url_or_path))
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
        cursor.close()

    return engine


class SQLExperienceStorage:
    """Append-only experience table with an id cursor for incremental reads."""

    def __init__(self, url_or_path: str, table_name: str = EXPERIENCE_TABLE) -> None:
        self.url = database_url(url_or_path)
        self.table_name = table_name
        self.model = experience_model(table_name)
        self.engine = open_engine(url_or_path)
        Base.metadata.create_all(self.engine, tables=[self.model.__table__])
        self._cursor = 0  # largest id handed out by read_new
        # one writer at a time inside a process; SQLite would otherwise retry on its lock
        self._write_lock = threading.Lock()
        self._cursor_lock = threading.Lock()  # two read_new calls must not share rows

    def write(self, exps: Iterable[Experience]) -> None:
        """Append ``exps`` in one transaction (all or nothing)."""
        rows = [self.model.from_experience(exp) for exp in exps]
        if not rows:
            return
        with self._write_lock, Session(self.engine) as sess, sess.begin():
            sess.add_all(rows)

    def read(self, n: int, offset: int = 0) -> list[Experience]:
        """Up to ``n`` experiences in insertion order, skipping the first ``offset``."""
        stmt = select(self.model).order_by(self.model.id).offset(offset).limit(n)
        with Session(self.engine) as sess:
            return [row.to_experience() for row in sess.scalars(stmt)]

    def read_new(self, n: int) -> list[Experience]:
        """Up to ``n`` experiences written after the last ones ``read_new`` returned."""
        stmt = select(self.model).order_by(self.model.id).limit(n)
        with self._cursor_lock, Session(self.engine) as sess:
            rows = list(sess.scalars(stmt.where(self.model.id > self._cursor)))
            if rows:
                self._cursor = rows[-1].id
            return [row.to_experience() for row in rows]

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

    def __init__(self, url_or_path: str, table_name: str = TASK_TABLE) -> None:
        self.url = database_url(url_or_path)
        self.table_name = table_name
        self.model = task_model(table_name)
        self.engine = open_engine(url_or_path)
        Base.metadata.create_all(self.engine, tables=[self.model.__table__])

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
