"""Mode ``serve``: the rollout model on the OpenAI API for agent programs outside the run,
their calls turned into experiences once they say how well the calls went.

    POST /v1/chat/completions, /v1/completions, GET /v1/models   (trinity/models/server.py)
    POST /feedback   {"msg_ids": ["chatcmpl-...", ...], "reward": 1.0}
    POST /commit     write the rewarded experiences into the experience buffer

Each completion's experiences wait under the response's ``id`` until a ``feedback`` call
names it; that call gives every experience of the ids it names its ``reward`` and makes
them one group (``eid.task``), so a group-relative advantage compares the calls one
feedback scored together. ``commit`` puts the rewarded experiences into
``buffer.trainer_input.experience_buffer``, where a trainer (mode ``train``, or another
run) reads them; calls without feedback are never written.

    trinity run --config serve.yaml   # mode: serve; Ctrl-C commits and stops
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field

from trinity.buffer.experience_buffer import ExperienceBuffer
from trinity.models.server import APIError, OpenAIServer
from trinity.models.wrapper import ModelWrapper
from trinity.types import EID, Experience


class FeedbackRequest(BaseModel):
    msg_ids: list[str] = Field(min_length=1)
    reward: float


class FeedbackStore:
    """Completions awaiting feedback, by response id, and the rewarded ones awaiting commit."""

    def __init__(self, buffer: ExperienceBuffer, logger: logging.Logger | None = None) -> None:
        self.buffer = buffer
        self.logger = logger or logging.getLogger("trinity.serve")
        self.pending: dict[str, list[Experience]] = {}
        self.rewarded: list[Experience] = []
        self.groups = 0  # feedback calls so far: the next group's eid.task
        self._lock = threading.Lock()

    def record(self, response_id: str, experiences: list[Experience]) -> None:
        with self._lock:
            self.pending[response_id] = experiences

    def feedback(self, msg_ids: list[str], reward: float) -> int:
        """Give the experiences of ``msg_ids`` their reward; returns how many."""
        with self._lock:
            unknown = [m for m in msg_ids if m not in self.pending]
            if unknown:
                raise APIError(
                    404,
                    f"no completion awaits feedback under {unknown}: msg_ids are the 'id' of "
                    "completions this server returned, each scored once",
                    param="msg_ids",
                    code="msg_not_found",
                )
            group = self.groups
            self.groups += 1
            run = 0
            for msg_id in msg_ids:
                for exp in self.pending.pop(msg_id):
                    exp.reward = float(reward)
                    exp.eid = EID(batch="serve", task=group, run=run)
                    exp.info["msg_id"] = msg_id
                    self.rewarded.append(exp)
                    run += 1
            return run

    def commit(self) -> int:
        """Write the rewarded experiences into the buffer; returns how many."""
        with self._lock:
            ready, self.rewarded = self.rewarded, []
        if ready:
            self.buffer.put(ready)
            self.logger.info("committed %d experiences to the buffer", len(ready))
        return len(ready)

    def routes(self, app: FastAPI) -> None:
        @app.post("/feedback")
        async def feedback(body: FeedbackRequest) -> dict[str, Any]:
            return {"status": "ok", "experiences": self.feedback(body.msg_ids, body.reward)}

        @app.post("/commit")
        async def commit() -> dict[str, Any]:
            return {"status": "ok", "experiences": self.commit()}


def serve(
    model: ModelWrapper,
    buffer: ExperienceBuffer,
    *,
    name: str,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    logger: logging.Logger | None = None,
) -> tuple[OpenAIServer, FeedbackStore]:
    """Start serving ``model`` as ``name`` with the feedback routes; returns the running
    server and its store (stop the server, then ``store.commit()``, to finish)."""
    store = FeedbackStore(buffer, logger)
    server = OpenAIServer(
        {name: model}, host, port, api_key, on_reply=store.record, extend=store.routes
    )
    return server.start(), store


def run_serve(config: Any, model_dir: str, logger: logging.Logger | None = None) -> None:
    """Mode serve in this process: the rollout engine, its server, until interrupted."""
    from trinity.buffer import make_experience_buffer
    from trinity.models.engine import TransformersEngine

    logger = logger or logging.getLogger("trinity.serve")
    rollout = config.explorer.rollout_model
    engine = TransformersEngine(
        model_dir, dtype=config.model.dtype, max_model_len=rollout.max_model_len
    )
    buffer = make_experience_buffer(config.buffer.trainer_input.experience_buffer)
    name = config.model.model_path  # the name the explorer's endpoint serves it under
    server, store = serve(
        ModelWrapper(engine, name=name),
        buffer,
        name=name,
        host=rollout.openai_api_host,
        port=rollout.openai_api_port,
        api_key=rollout.openai_api_key,
        logger=logger,
    )
    print(f"serving {name} at {server.base_url} (POST /feedback, /commit); Ctrl-C stops")
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        store.commit()
        engine.close()
