"""Mode ``serve``: the rollout model on the OpenAI API for agent programs outside the run,
their calls turned into experiences once they say how well the calls went.

    POST /v1/chat/completions, /v1/completions, GET /v1/models   (trinity/models/server.py)
    POST /feedback   {"msg_ids": ["chatcmpl-...", ...], "reward": 1.0, "task_id": "a1b2c3"}
    POST /commit     write the rewarded experiences into the experience buffer
    GET  /health     200 once serving;  GET /metrics   counts of calls and experiences

The routes and bodies are Trinity-RFT's serve mode's (its ``TrinityClient`` posts
``reward``, ``msg_ids`` and its ``task_id``; replies are ``{"status": "success", ...}``).
Each completion's experiences wait under the response's ``id`` until a ``feedback`` call
names it; that call gives every experience of the ids it names its ``reward`` and a
group (``eid.task``): the ``task_id`` it sends, so one client's calls form one group, or
without one a group of their own, so a group-relative advantage compares the calls one
feedback scored together. ``run_id`` (optional) sets ``eid.run``. Unlike upstream, which
ignores ids it does not hold, an unknown or already scored id fails the call (404). ``commit`` puts the rewarded experiences into
``buffer.trainer_input.experience_buffer``, where a trainer (mode ``train``, or another
run) reads them; calls without feedback are never written.

The endpoint listens on ``explorer.rollout_model.openai_api_host:openai_api_port``; a
config written for upstream's proxy sets them with ``explorer.proxy_port`` (older:
``api_port``) and ``explorer.listen_address`` (resolved in trinity/config/resolve.py).

    trinity run --config serve.yaml   # mode: serve; Ctrl-C commits and stops
"""

from __future__ import annotations

import logging
import signal
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
    task_id: str | int | None = None  # the group; unset: a group of this call's ids
    run_id: int | None = None  # eid.run of every experience; unset: numbered in the group


class FeedbackStore:
    """Completions awaiting feedback, by response id, and the rewarded ones awaiting commit."""

    def __init__(self, buffer: ExperienceBuffer, logger: logging.Logger | None = None) -> None:
        self.buffer = buffer
        self.logger = logger or logging.getLogger("trinity.serve")
        self.pending: dict[str, list[Experience]] = {}
        self.rewarded: list[Experience] = []
        self.groups = 0  # feedback calls so far: the next group's eid.task
        self.committed = 0
        self._lock = threading.Lock()

    def record(self, response_id: str, experiences: list[Experience]) -> None:
        with self._lock:
            self.pending[response_id] = experiences

    def feedback(
        self,
        msg_ids: list[str],
        reward: float,
        task_id: str | int | None = None,
        run_id: int | None = None,
    ) -> int:
        """Give the experiences of ``msg_ids`` their reward and group; returns how many."""
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
            group: str | int = self.groups if task_id is None else task_id
            self.groups += 1
            run = 0
            for msg_id in msg_ids:
                for exp in self.pending.pop(msg_id):
                    exp.reward = float(reward)
                    exp.eid = EID(batch="serve", task=group, run=run if run_id is None else run_id)
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
            self.committed += len(ready)
            self.logger.info("committed %d experiences to the buffer", len(ready))
        return len(ready)

    def metrics(self) -> dict[str, int]:
        with self._lock:
            return {
                "pending_calls": len(self.pending),
                "rewarded_experiences": len(self.rewarded),
                "committed_experiences": self.committed,
                "feedback_calls": self.groups,
            }

    def routes(self, app: FastAPI) -> None:
        @app.post("/feedback")
        async def feedback(body: FeedbackRequest) -> dict[str, Any]:
            scored = self.feedback(body.msg_ids, body.reward, body.task_id, body.run_id)
            return {"status": "success", "experiences": scored}

        @app.post("/commit")
        async def commit() -> dict[str, Any]:
            return {"status": "success", "experiences": self.commit()}

        @app.get("/health")
        async def health() -> dict[str, str]:
            return {"status": "ok"}

        @app.get("/metrics")
        async def metrics() -> dict[str, int]:
            return self.metrics()


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
    print(
        f"serving {name} at {server.base_url} (POST /feedback, /commit); Ctrl-C stops",
        flush=True,  # a supervisor reading the pipe learns the port now
    )
    # SIGTERM stops as Ctrl-C does: the rewarded calls are committed before exiting
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        server.stop()
        committed = store.commit()
        engine.close()
        print(f"stopped; committed {committed} experiences", flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
