"""Mode ``serve``: the rollout model on the OpenAI API for agent programs outside the run,
their calls turned into experiences once they say how well the calls went.

    POST /v1/chat/completions, /v1/completions, GET /v1/models   (trinity/rollout/server.py)
    POST /feedback   {"msg_ids": ["chatcmpl-...", ...], "reward": 1.0, "task_id": "a1b2c3"}
    POST /commit     write the scored experiences into the experience buffer
    GET  /health     200 once serving;  GET /metrics   counts of calls and experiences

The routes and bodies are Trinity-RFT's serve mode's (its ``TrinityClient`` posts
``reward``, ``msg_ids`` and its ``task_id``; replies are ``{"status": "success", ...}``).
Each completion's experiences wait under the response's ``id`` until a ``feedback`` call
names it; that call gives every experience of the ids it names its ``reward`` and a
group (``eid.task``): the ``task_id`` it sends, so one client's calls form one group, or
without one a group of their own, so a group-relative advantage compares the calls one
feedback scored together. ``run_id`` (optional) sets ``eid.run``. Unlike upstream, which
ignores ids it does not hold, an unknown, expired or already scored id fails the call
(404). A completion that gets no feedback within ``explorer.serve.feedback_timeout``
seconds is dropped (``expired_calls`` in ``/metrics``, and a warning in the log).

``feedback`` answers once the experiences it scored are in the journal
(:mod:`trinity.explorer.serve_journal`, ``<job_dir>/serve/feedback_journal.jsonl``), so
they outlive a killed process: a run started again on the same job directory commits
them. ``commit`` puts the scored experiences into
``buffer.trainer_input.experience_buffer``, where a trainer (mode ``train``, or another
run) reads them, then drops them from the journal. The write runs on a thread of its
own: when the buffer does not take them within ``explorer.serve.commit_timeout``
seconds, ``/commit`` answers 503 saying so, the write goes on, and the other routes keep
answering meanwhile; a failed write keeps them for the next ``/commit``.

The endpoint listens on ``explorer.rollout_model.openai_api_host:openai_api_port``; a
config written for upstream's proxy sets them with ``explorer.proxy_port`` (older:
``api_port``) and ``explorer.listen_address`` (resolved in trinity/config/derived.py).

    trinity run --config serve.yaml   # mode: serve; Ctrl-C or SIGTERM commits and stops
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
import threading
import time
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field

from trinity.buffer.experience_buffer import ExperienceBuffer
from trinity.config.schema.explorer import ServeConfig
from trinity.explorer.serve_journal import JOURNAL_NAME, FeedbackJournal
from trinity.rollout.openai_admission import AdmissionLimits
from trinity.rollout.server import APIError, OpenAIServer
from trinity.rollout.wrapper import ModelWrapper
from trinity.types import EID, Experience

_TIMEOUTS = (TimeoutError, concurrent.futures.TimeoutError, asyncio.TimeoutError)


class FeedbackRequest(BaseModel):
    msg_ids: list[str] = Field(min_length=1)
    reward: float
    task_id: str | int | None = None  # the group; unset: a group of this call's ids
    run_id: int | None = None  # eid.run of every experience; unset: numbered in the group


class FeedbackStore:
    """Completions awaiting feedback, by response id, and the scored ones awaiting commit.

    ``journal``: where scored experiences wait for their commit (None: in memory only);
    what it holds from an earlier process is scored already and goes with the next commit.
    """

    def __init__(
        self,
        buffer: ExperienceBuffer,
        logger: logging.Logger | None = None,
        *,
        settings: ServeConfig | None = None,
        journal: FeedbackJournal | None = None,
    ) -> None:
        self.buffer = buffer
        self.logger = logger or logging.getLogger("trinity.serve")
        self.settings = settings or ServeConfig()
        self.journal = journal
        # response id -> (time.monotonic() of the reply, its experiences), oldest first
        self.pending: dict[str, tuple[float, list[Experience]]] = {}
        self.rewarded: list[Experience] = journal.replay() if journal is not None else []
        if self.rewarded:
            self.logger.info(
                "%d scored experiences from %s wait for the next commit",
                len(self.rewarded),
                journal.path,  # type: ignore[union-attr]
            )
        self.feedback_calls = 0
        # the next group's eid.task: after those of the replayed experiences, so that a
        # commit holding both never merges two groups
        numbered = [e.eid.task for e in self.rewarded if isinstance(e.eid.task, int)]
        self.next_group = max(numbered, default=-1) + 1
        self.committed = 0
        self.expired = 0
        self._lock = threading.Lock()  # pending, rewarded and the counts
        # one writer of the journal at a time, so its lines stay in rewarded's order
        self._journal_lock = threading.Lock()
        self._commit: concurrent.futures.Future[int] | None = None

    def record(self, response_id: str, experiences: list[Experience]) -> None:
        with self._lock:
            self._expire()
            self.pending[response_id] = (time.monotonic(), experiences)

    def _expire(self) -> None:
        """Drop the completions older than feedback_timeout (the caller holds the lock)."""
        deadline = time.monotonic() - self.settings.feedback_timeout
        dropped = 0
        while self.pending:
            oldest = next(iter(self.pending))
            if self.pending[oldest][0] > deadline:
                break
            del self.pending[oldest]
            dropped += 1
        if dropped:
            self.expired += dropped
            self.logger.warning(
                "dropped %d completions that got no /feedback within %g s "
                "(explorer.serve.feedback_timeout); %d so far",
                dropped,
                self.settings.feedback_timeout,
                self.expired,
            )

    def feedback(
        self,
        msg_ids: list[str],
        reward: float,
        task_id: str | int | None = None,
        run_id: int | None = None,
    ) -> int:
        """Give the experiences of ``msg_ids`` their reward and group and write them to the
        journal; returns how many."""
        with self._journal_lock:
            with self._lock:
                self._expire()
                unknown = [m for m in dict.fromkeys(msg_ids) if m not in self.pending]
                if unknown:
                    raise APIError(
                        404,
                        f"no completion awaits feedback under {unknown}: msg_ids are the "
                        "'id' of completions this server returned, each scored once, within "
                        f"{self.settings.feedback_timeout:g} s (explorer.serve.feedback_timeout)",
                        param="msg_ids",
                        code="msg_not_found",
                    )
                group: str | int = self.next_group if task_id is None else task_id
                scored = []
                for msg_id in dict.fromkeys(msg_ids):
                    for exp in self.pending[msg_id][1]:
                        run = len(scored) if run_id is None else run_id
                        exp.reward = float(reward)
                        exp.eid = EID(batch="serve", task=group, run=run)
                        exp.info["msg_id"] = msg_id
                        scored.append(exp)
            if self.journal is not None:
                self.journal.append(scored)  # on disk before the answer
            with self._lock:
                for msg_id in msg_ids:
                    self.pending.pop(msg_id, None)
                self.feedback_calls += 1
                if task_id is None:
                    self.next_group += 1
                self.rewarded.extend(scored)
            return len(scored)

    def commit(self, timeout: float | None = None) -> int:
        """Write the scored experiences into the buffer; returns how many. Raises
        TimeoutError when the buffer has not taken them within ``timeout`` seconds (the
        write goes on), or the buffer's error (they are kept for the next commit)."""
        return self._start_commit().result(timeout)

    def _start_commit(self) -> concurrent.futures.Future[int]:
        """The commit in flight, or a new one on a thread of its own (a daemon: a buffer
        that never makes room must not keep the process from exiting)."""
        with self._lock:
            if self._commit is not None and not self._commit.done():
                return self._commit
            future: concurrent.futures.Future[int] = concurrent.futures.Future()
            self._commit = future
        threading.Thread(
            target=self._write, args=(future,), name="serve-commit", daemon=True
        ).start()
        return future

    def _write(self, future: concurrent.futures.Future[int]) -> None:
        try:
            with self._lock:
                ready = list(self.rewarded)  # the journal's first len(ready) lines
            if ready:
                self.buffer.put(ready)
                with self._journal_lock:
                    if self.journal is not None:
                        self.journal.drop_first(len(ready))
                    with self._lock:
                        del self.rewarded[: len(ready)]
                        self.committed += len(ready)
                self.logger.info("committed %d experiences to the buffer", len(ready))
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(len(ready))

    def metrics(self) -> dict[str, int]:
        with self._lock:
            self._expire()
            return {
                "pending_calls": len(self.pending),
                "expired_calls": self.expired,
                "rewarded_experiences": len(self.rewarded),
                "committed_experiences": self.committed,
                "feedback_calls": self.feedback_calls,
            }

    def routes(self, app: FastAPI) -> None:
        @app.post("/feedback")
        def feedback(body: FeedbackRequest) -> dict[str, Any]:
            # a plain def: the journal's fsync runs on a worker thread, not the event loop
            scored = self.feedback(body.msg_ids, body.reward, body.task_id, body.run_id)
            return {"status": "success", "experiences": scored}

        @app.post("/commit")
        async def commit() -> dict[str, Any]:
            waiting = asyncio.wrap_future(self._start_commit())
            timeout = self.settings.commit_timeout
            try:
                done = await asyncio.wait_for(asyncio.shield(waiting), timeout)
            except _TIMEOUTS:
                raise APIError(
                    503,
                    f"the experience buffer took no experiences within {timeout:g} s "
                    "(explorer.serve.commit_timeout): it is full and nothing reads it, or "
                    "slow; the write goes on, and the scored experiences are kept until it "
                    "succeeds",
                    type="server_error",
                    code="buffer_full",
                ) from None
            except Exception as exc:
                raise APIError(
                    503,
                    f"the experience buffer refused the scored experiences ({exc!r}); they "
                    "are kept, and the next /commit writes them again",
                    type="server_error",
                    code="buffer_error",
                ) from None
            return {"status": "success", "experiences": done}

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
    settings: ServeConfig | None = None,
    journal: FeedbackJournal | None = None,
    limits: AdmissionLimits | None = None,
) -> tuple[OpenAIServer, FeedbackStore]:
    """Start serving ``model`` as ``name`` with the feedback routes; returns the running
    server and its store (stop the server, then ``store.commit()``, to finish).
    ``limits``: the endpoint's admission limits (default: the config's defaults)."""
    store = FeedbackStore(buffer, logger, settings=settings, journal=journal)
    server = OpenAIServer(
        {name: model},
        host,
        port,
        api_key,
        on_reply=store.record,
        extend=store.routes,
        limits=limits,
    )
    return server.start(), store


def run_serve(config: Any, model_dir: str, logger: logging.Logger | None = None) -> None:
    """Mode serve in this process: the rollout engine, its server, until interrupted."""
    from trinity.buffer import make_experience_buffer
    from trinity.config import job_dir
    from trinity.rollout.vision_engine import rollout_engine

    logger = logger or logging.getLogger("trinity.serve")
    rollout, settings = config.explorer.rollout_model, config.explorer.serve
    journal = FeedbackJournal(job_dir(config) / JOURNAL_NAME)
    engine = rollout_engine(
        model_path=model_dir, dtype=config.model.dtype, max_model_len=rollout.max_model_len
    )
    buffer = make_experience_buffer(config.buffer.trainer_input.experience_buffer)
    name = config.model.model_path  # the name the explorer's endpoint serves it under
    # SIGTERM stops as Ctrl-C does (the scored calls are committed before exiting); set
    # before the line below, after which a supervisor may send it
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _interrupt)
    server = None
    try:
        server, store = serve(
            ModelWrapper(engine, name=name),
            buffer,
            name=name,
            host=rollout.openai_api_host,
            port=rollout.openai_api_port,
            api_key=rollout.openai_api_key,
            logger=logger,
            settings=settings,
            journal=journal,
            limits=AdmissionLimits.from_config(rollout),
        )
        print(
            f"serving {name} at {server.base_url} (POST /feedback, /commit); Ctrl-C stops",
            flush=True,  # a supervisor reading the pipe learns the port now
        )
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if server is not None:
            server.stop()
            print(_final_commit(store, settings.commit_timeout, journal), flush=True)
        buffer.close()
        journal.close()
        engine.close()


def _final_commit(store: FeedbackStore, timeout: float, journal: FeedbackJournal) -> str:
    """Commit what is scored at the stop; the line that says how it went."""
    try:
        return f"stopped; committed {store.commit(timeout)} experiences"
    except Exception as exc:  # the timeouts included
        reason = "the buffer took none in time" if isinstance(exc, _TIMEOUTS) else repr(exc)
        return (
            f"stopped; {len(store.rewarded)} scored experiences not committed ({reason}): "
            f"they stay in {journal.path}, and a run started again on this job directory "
            "commits them"
        )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
