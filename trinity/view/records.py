"""Experiences of a run, page by page, for ``trinity view``.

A source is a SQL database (a SQLite file or any SQLAlchemy URL; table ``experience``
unless told otherwise) or a JSON-lines file of experiences. Rows are decoded with the
buffer's own codecs: nothing is unpickled. With a tokenizer, each response token is
shown as text next to its log-probability; without one, as its id.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trinity.buffer.jsonl import JsonlReader
from trinity.buffer.schema import EXPERIENCE_TABLE
from trinity.buffer.sql_storage import SQLExperienceStorage
from trinity.types import Experience


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
        }


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
        self._jsonl: JsonlReader | None = None
        if path.endswith((".jsonl", ".json")) and "://" not in path:
            if not os.path.isfile(path):
                raise ViewSourceError(f"no experience file at '{path}'")
            self._jsonl = JsonlReader(path)
        else:
            if "://" not in path and not os.path.isfile(path):
                raise ViewSourceError(
                    f"no database at '{path}'; give a SQLite file, a SQLAlchemy URL, or a .jsonl file"
                )
            self._storage = SQLExperienceStorage(path, table_name=table)

    def count(self) -> int:
        if self._storage is not None:
            return self._storage.count()
        return len(self._jsonl_all())

    def page(self, offset: int, limit: int) -> list[ExperienceView]:
        offset, limit = max(0, offset), max(0, limit)
        if self._storage is not None:
            exps = self._storage.read(limit, offset=offset)
        else:
            exps = self._jsonl_all()[offset : offset + limit]
        return [self.view(offset + i, exp) for i, exp in enumerate(exps)]

    def view(self, index: int, exp: Experience) -> ExperienceView:
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
            model_version=exp.model_version,
            reward=exp.reward,
            prompt=prompt,
            response=response,
            tokens=tokens,
            prompt_length=exp.prompt_length,
            metrics=dict(exp.metrics),
            info={k: v for k, v in exp.info.items() if k != "model_version"},
        )

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()

    def _jsonl_all(self) -> list[Experience]:
        # re-read each time: the file may still be growing while a run writes it
        assert self._jsonl is not None
        return self._jsonl.read_all()


def tokenizer_decoder(tokenizer_path: str) -> Callable[[list[int]], list[str]]:
    """Per-token texts from a local tokenizer directory (transformers)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)

    def decode(ids: list[int]) -> list[str]:
        return [tokenizer.decode([i]) for i in ids]

    return decode


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
