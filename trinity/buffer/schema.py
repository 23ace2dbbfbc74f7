"""SQL tables of the buffer (SQLAlchemy 2.0 declarative), stored without pickle.

``ExperienceModel`` keeps one Experience per row. Each tensor field is a
``LargeBinary`` of raw little-endian element bytes; their dtypes and shapes live in
the ``tensor_meta`` JSON column (``{"tokens": {"dtype": "int64", "shape": [L]}, ...}``),
so any language that reads SQLite and JSON can decode a row. Plain fields (reward,
prompt_length, eid parts, model_version, temperature, texts) are ordinary columns that can be
queried; ``info``, ``metrics`` and ``messages`` are JSON.

Reading a database outside the framework::

    sess = sessionmaker(bind=create_engine("sqlite:///buffer.db"))()
    exps = [ExperienceModel.to_experience(row) for row in sess.query(ExperienceModel).limit(4)]

On PostgreSQL, text cannot hold NUL characters: a NUL in ``prompt_text`` or
``response_text`` is stored as U+FFFD (the token ids keep the exact sequence).

``TaskModel`` keeps one taskset row (the raw dict, as JSON) per table row for
``storage_type: sql`` tasksets.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

from sqlalchemy import JSON, Dialect, Float, Integer, LargeBinary, Text, TypeDecorator
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from trinity.buffer.codec import (
    TENSOR_FIELDS,
    check_json,
    tensor_from_bytes,
    tensor_to_bytes,
)
from trinity.buffer.errors import ExperienceCodecError
from trinity.types import EID, Experience

logger = logging.getLogger(__name__)

EXPERIENCE_TABLE = "experience"
TASK_TABLE = "task"


class Base(DeclarativeBase):
    pass


class DisplayText(TypeDecorator[str]):
    """Text kept for people to read; PostgreSQL gets NUL replaced by U+FFFD.

    PostgreSQL refuses NUL in text; failing the whole batch over a decoded byte token
    would stop a run, and the tokens tensor keeps the exact sequence anyway.
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is not None and dialect.name == "postgresql" and "\x00" in value:
            logger.warning("text with NUL characters stored with U+FFFD in their place")
            return value.replace("\x00", "\ufffd")
        return value


class ExperienceColumns:
    """Columns and conversions of an experience table; mixed into one class per table."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # (L,) prompt + response token ids, and the (R,) per-response-token tensors
    tokens: Mapped[bytes] = mapped_column(LargeBinary)
    logprobs: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    action_mask: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    advantages: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    returns: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    chosen: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    rejected: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    teacher_logprobs: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    tensor_meta: Mapped[dict[str, Any]] = mapped_column(JSON)

    prompt_length: Mapped[int] = mapped_column(Integer)
    reward: Mapped[float | None] = mapped_column(Float, nullable=True)
    # EID.batch / EID.task may be ints or strings ("eval_3"); JSON keeps which one
    eid_batch: Mapped[Any] = mapped_column(JSON)
    eid_task: Mapped[Any] = mapped_column(JSON)
    eid_run: Mapped[int] = mapped_column(Integer)
    eid_step: Mapped[int] = mapped_column(Integer)
    model_version: Mapped[int] = mapped_column(Integer, index=True)
    # the rollout's sampling temperature; NULL in rows written before it was kept
    temperature: Mapped[float | None] = mapped_column(Float, nullable=True)

    info: Mapped[dict[str, Any]] = mapped_column(JSON)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    messages: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    prompt_text: Mapped[str | None] = mapped_column(DisplayText, nullable=True)
    response_text: Mapped[str | None] = mapped_column(DisplayText, nullable=True)
    # a vision-language rollout's images: their tensors are a row of <table>_media
    media_digest: Mapped[str | None] = mapped_column(Text, nullable=True, index=True)

    @classmethod
    def from_experience(cls, exp: Experience) -> Any:
        """Build a row of this table from ``exp`` (raises ExperienceCodecError)."""
        if exp.reward is not None and math.isnan(exp.reward):
            # SQLite stores NaN as NULL, which would read back as "not scored"
            raise ExperienceCodecError(
                f"experience {exp.eid} has a NaN reward, which SQL cannot store; "
                "check the reward function"
            )
        blobs: dict[str, bytes | None] = {}
        meta: dict[str, dict[str, Any]] = {}
        for name in TENSOR_FIELDS:
            value = getattr(exp, name)
            if value is None:
                blobs[name] = None
            else:
                blobs[name], meta[name] = tensor_to_bytes(value)
        return cls(
            **blobs,
            tensor_meta=meta,
            prompt_length=int(exp.prompt_length),
            reward=None if exp.reward is None else float(exp.reward),
            eid_batch=exp.eid.batch,
            eid_task=exp.eid.task,
            eid_run=int(exp.eid.run),
            eid_step=int(exp.eid.step),
            model_version=exp.model_version,
            temperature=None if exp.temperature is None else float(exp.temperature),
            info=check_json(exp.info, "info"),
            metrics=check_json(exp.metrics, "metrics"),
            messages=check_json(exp.messages, "messages"),
            prompt_text=exp.prompt_text,
            response_text=exp.response_text,
            media_digest=None if exp.media is None else exp.media.digest,
        )

    def to_experience(self) -> Experience:
        tensors = {
            name: None
            if getattr(self, name) is None
            else tensor_from_bytes(getattr(self, name), self.tensor_meta[name])
            for name in TENSOR_FIELDS
        }
        return Experience(
            prompt_length=self.prompt_length,
            reward=self.reward,
            eid=EID(batch=self.eid_batch, task=self.eid_task, run=self.eid_run, step=self.eid_step),
            info=dict(self.info or {}),
            metrics=dict(self.metrics or {}),
            messages=self.messages,
            prompt_text=self.prompt_text,
            response_text=self.response_text,
            temperature=self.temperature,
            **tensors,
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} id={self.id} eid={self.eid_batch}/{self.eid_task}/{self.eid_run}>"


class ExperienceModel(ExperienceColumns, Base):
    """The default experience table, ``experience``."""

    __tablename__ = EXPERIENCE_TABLE


class MediaColumns:
    """One prompt's images as the model takes them (``Experience.media``), shared by the
    experience rows whose ``media_digest`` names it: the tensors' bytes one after the
    other in ``tensors``, each one's dtype, shape and byte range in ``tensor_meta``."""

    digest: Mapped[str] = mapped_column(Text, primary_key=True)
    tensors: Mapped[bytes] = mapped_column(LargeBinary)
    tensor_meta: Mapped[dict[str, Any]] = mapped_column(JSON)


class TaskColumns:
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    raw: Mapped[dict[str, Any]] = mapped_column(JSON)  # the taskset row as read from its source

    def __repr__(self) -> str:
        return f"<{type(self).__name__} id={self.id}>"


class TaskModel(TaskColumns, Base):
    """The default taskset table, ``task``."""

    __tablename__ = TASK_TABLE


_EXPERIENCE_MODELS: dict[str, type[ExperienceColumns]] = {EXPERIENCE_TABLE: ExperienceModel}
_TASK_MODELS: dict[str, type[TaskColumns]] = {TASK_TABLE: TaskModel}
# mapping the same table twice is an error, so two threads must not both create it
_MODELS_LOCK = threading.Lock()


def experience_model(table_name: str = EXPERIENCE_TABLE) -> type[ExperienceColumns]:
    """The mapped class for an experience table named ``table_name`` (made once per name)."""
    with _MODELS_LOCK:
        if table_name not in _EXPERIENCE_MODELS:
            _EXPERIENCE_MODELS[table_name] = type(
                f"ExperienceModel_{table_name}",
                (ExperienceColumns, Base),
                {"__tablename__": table_name},
            )
        return _EXPERIENCE_MODELS[table_name]


_MEDIA_MODELS: dict[str, type[MediaColumns]] = {}


def media_model(experience_table: str = EXPERIENCE_TABLE) -> type[MediaColumns]:
    """The mapped class of the media table of ``experience_table`` (``<name>_media``)."""
    name = f"{experience_table}_media"
    with _MODELS_LOCK:
        if name not in _MEDIA_MODELS:
            _MEDIA_MODELS[name] = type(
                f"MediaModel_{name}", (MediaColumns, Base), {"__tablename__": name}
            )
        return _MEDIA_MODELS[name]


def task_model(table_name: str = TASK_TABLE) -> type[TaskColumns]:
    """The mapped class for a taskset table named ``table_name`` (made once per name)."""
    with _MODELS_LOCK:
        if table_name not in _TASK_MODELS:
            _TASK_MODELS[table_name] = type(
                f"TaskModel_{table_name}", (TaskColumns, Base), {"__tablename__": table_name}
            )
        return _TASK_MODELS[table_name]
