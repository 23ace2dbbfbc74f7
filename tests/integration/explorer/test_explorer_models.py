"""The explorer's models as workflows see them: per-runner history, auxiliary models,
the OpenAI-compatible endpoint and the config's token limits.

Workflows registered here make two calls each and return what their model recorded;
a barrier makes the two runner slots' calls interleave, so a history shared between
slots would show the other task's calls.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path

import openai
import pytest
import torch
from behaviour_workflow import DeliberateFailure, behaviour_config, behaviour_task

from trinity.explorer.explorer import Explorer
from trinity.explorer.runner import RunnerPool
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.wrapper import ModelClosedError, ModelWrapper
from trinity.types import Experience
from trinity.utils.log import get_actor_logger
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS

MARKERS = ["alpha", "bravo", "charlie", "delta"]
KEY = "test-key-123"
SYNC = {"barrier": threading.Barrier(2), "tries": {}}
LATE = {
    "release": threading.Event(),
    "called": threading.Event(),
    "refused": threading.Event(),
    "hold": threading.Event(),
}


@pytest.fixture(autouse=True)
def fresh_sync():
    SYNC["barrier"] = threading.Barrier(2)
    SYNC["tries"] = {}
    for event in LATE.values():
        event.clear()
    yield
    SYNC["barrier"].abort()  # no workflow thread waits past its test
    LATE["release"].set()
    LATE["hold"].set()


@WORKFLOWS.register("two_calls_test_workflow")
class TwoCallsWorkflow(Workflow):
    """Two chat calls about the task's marker (direct or through the OpenAI client);
    returns the model's history. ``fail_first`` raises after one call on the first try."""

    async def run_async(self) -> list[Experience]:
        marker = self.task.raw["question"]
        tries = SYNC["tries"]
        tries[marker] = tries.get(marker, 0) + 1
        first = [{"role": "user", "content": f"Say {marker}."}]
        second = first + [
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": f"Again {marker}."},
        ]
        if self.task.raw.get("via") == "openai":
            client = self.model.get_openai_async_client()

            async def call(messages):
                await client.chat.completions.create(
                    model=self.model.name, messages=messages, max_tokens=3, temperature=1.0
                )
        else:

            async def call(messages):
                await self.model.achat(messages, max_tokens=3)

        await call(first)
        if self.task.raw.get("behaviour") == "fail_first" and tries[marker] == 1:
            raise DeliberateFailure(f"{marker} fails its first try after one call")
        # both slots have made their first call before either makes its second
        await asyncio.to_thread(SYNC["barrier"].wait, 60)
        await call(second)
        return self.model.extract_experience_from_history()


@WORKFLOWS.register("late_call_test_workflow")
class LateCallWorkflow(Workflow):
    """``late``: blocks, then calls the model after its task timed out (the call is
    refused), and blocks again until the test ends; ``two``: lets the late one go, waits
    for its call, then makes two calls and returns the history."""

    async def run_async(self) -> list[Experience]:
        if self.task.raw["behaviour"] == "late":
            await asyncio.to_thread(LATE["release"].wait, 60)
            try:
                await self.model.achat([{"role": "user", "content": "late caller"}], max_tokens=3)
            except ModelClosedError:
                LATE["refused"].set()
            LATE["called"].set()
            await asyncio.to_thread(LATE["hold"].wait, 60)
            return []
        LATE["release"].set()
        assert await asyncio.to_thread(LATE["called"].wait, 60)
        for _ in range(2):
            await self.model.achat([{"role": "user", "content": "on time"}], max_tokens=3)
        return self.model.extract_experience_from_history()


@WORKFLOWS.register("auxiliary_test_workflow")
class AuxiliaryWorkflow(Workflow):
    """One policy sample and one auxiliary-model call without max_tokens."""

    async def run_async(self) -> list[Experience]:
        [aux] = self.auxiliary_models
        [exp] = await self.model.achat([{"role": "user", "content": self.task.raw["question"]}])
        [judged] = await aux.achat([{"role": "user", "content": "Grade: " + exp.response_text}])
        recorded = aux.extract_experience_from_history()
        exp.info["aux_engine"] = id(aux.engine)
        exp.info["aux_response_length"] = judged.response_length
        exp.info["aux_recorded"] = [e.prompt_text for e in recorded]
        return [exp]


def _write_rows(directory: Path, rows: list[dict]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        (directory / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return directory


def _config(tiny_model_dir: Path, tmp_path: Path, rows: list[dict], workflow: str, *overrides):
    data = _write_rows(tmp_path / "data", rows)
    return behaviour_config(
        tiny_model_dir,
        tmp_path,
        data,
        f"buffer.batch_size={len(rows)}",
        "explorer.runner_per_model=2",
        "explorer.max_timeout=120",
        "explorer.max_retry_times=1",
        f"buffer.explorer_input.default_workflow_type={workflow}",
        f"buffer.default_workflow_type={workflow}",
        *overrides,
    )


def _by_task(experiences: list[Experience]) -> dict[int, list[Experience]]:
    tasks: dict[int, list[Experience]] = {}
    for exp in experiences:
        tasks.setdefault(exp.eid.task, []).append(exp)
    return tasks


def _check_own_calls(experiences: list[Experience]) -> None:
    """Each task returned exactly its two calls, in order, and nobody else's."""
    tasks = _by_task(experiences)
    assert sorted(tasks) == [0, 1, 2, 3]
    for index, exps in tasks.items():
        marker = MARKERS[index]
        assert len(exps) == 2, [e.prompt_text for e in exps]
        assert f"Say {marker}." in exps[0].prompt_text
        assert f"Again {marker}." in exps[1].prompt_text
        others = [m for m in MARKERS if m != marker]
        assert not any(m in e.prompt_text for e in exps for m in others)


def test_each_workflow_history_holds_only_its_own_calls(tiny_model_dir: Path, tmp_path: Path):
    rows = [{"question": m, "answer": "x"} for m in MARKERS]
    rows[1]["behaviour"] = "fail_first"  # its failed try's call must not reach the retry
    config = _config(
        tiny_model_dir,
        tmp_path,
        rows,
        "two_calls_test_workflow",
        "explorer.rollout_model.enable_history=true",
    )
    explorer = Explorer(config, model_dir=tiny_model_dir, log_dir=tmp_path / "log")
    try:
        experiences, metrics = explorer.explore_step(1)
        assert metrics["rollout/failed_tasks"] == 0
        assert SYNC["tries"]["bravo"] == 2
        _check_own_calls(experiences)
        slots = explorer.runners.slots
        assert len(slots) == 2 and slots[0].model is not slots[1].model
        assert slots[0].model.engine is slots[1].model.engine
        assert all(s.model.enable_history for s in slots)
        # nothing stays behind in the slots' histories once their tasks are done
        assert all(s.model.history == [] for s in slots)
    finally:
        explorer.close()


def test_a_timed_out_task_cannot_write_into_the_next_task_history(
    tiny_model_dir: Path, tmp_path: Path
):
    engine = TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=256)
    pool = RunnerPool(
        [ModelWrapper(engine, enable_history=True)],
        num_runners=1,
        max_timeout=2,
        max_retry_times=0,
        log_dir=tmp_path,
    )

    workflow = "late_call_test_workflow"
    try:
        assert pool.run_tasks([behaviour_task(0, "late", workflow)], batch_id=1).timed_out == 1
        # the late workflow calls its model while the next task runs on the same slot
        result = pool.run_tasks([behaviour_task(1, "two", workflow)], batch_id=2)
        assert (result.failed, result.timed_out) == (0, 0)
        assert LATE["called"].is_set() and LATE["refused"].is_set()
        assert pool.refused_calls == 1
        assert len(result.experiences) == 2
        assert all("on time" in e.prompt_text for e in result.experiences)
    finally:
        pool.close()
        engine.close()


def test_openai_client_calls_are_recorded_in_their_own_workflow(
    tiny_model_dir: Path, tmp_path: Path
):
    rows = [{"question": m, "answer": "x", "via": "openai"} for m in MARKERS]
    config = _config(
        tiny_model_dir,
        tmp_path,
        rows,
        "two_calls_test_workflow",
        "explorer.rollout_model.enable_history=true",
        "explorer.rollout_model.enable_openai_api=true",
        f"explorer.rollout_model.openai_api_key={KEY}",
    )
    log_dir = tmp_path / "log"
    logger = get_actor_logger("explorer", log_dir)
    explorer = Explorer(config, model_dir=tiny_model_dir, log_dir=log_dir, logger=logger)
    try:
        log = (log_dir / "explorer.log").read_text()
        found = re.search(r"replica 0: OpenAI API at (http://127\.0\.0\.1:\d+/v1)", log)
        assert found, log
        base_url = found.group(1)
        assert explorer.served[0].base_urls == [base_url]

        experiences, metrics = explorer.explore_step(1)
        assert metrics["rollout/failed_tasks"] == 0
        _check_own_calls(experiences)
        for exp in experiences:
            assert exp.response_length <= 3 and exp.logprobs is not None
            assert exp.info["model_version"] == 0

        # the logged address answers outside any workflow and records into no history
        client = openai.OpenAI(base_url=base_url, api_key=KEY)
        reply = client.chat.completions.create(
            model=explorer.model.name,
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=2,
        )
        assert len(reply.choices) == 1
        assert all(s.model.history == [] for s in explorer.runners.slots)
        assert explorer.served[0].roots[0].history == []
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base_url, api_key="wrong").models.list()
    finally:
        explorer.close()
    with pytest.raises(openai.APIConnectionError):  # the server stops with the explorer
        openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=5).models.list()


def test_auxiliary_models_reach_workflows_and_get_no_weights(tiny_model_dir: Path, tmp_path: Path):
    rows = [{"question": m, "answer": "x"} for m in MARKERS[:2]]
    aux = f"{{model_path: '{tiny_model_dir}', max_response_tokens: 3, enable_history: true}}"
    config = _config(
        tiny_model_dir,
        tmp_path,
        rows,
        "auxiliary_test_workflow",
        f"explorer.auxiliary_models=[{aux}]",
        "model.min_response_tokens=2",
    )
    explorer = Explorer(config, model_dir=tiny_model_dir, log_dir=tmp_path / "log")
    try:
        # the rollout model's limits come from config.model
        assert (explorer.model.max_prompt_tokens, explorer.model.max_response_tokens) == (64, 4)
        assert explorer.model.min_response_tokens == 2
        [aux_replicas] = explorer.served[1:]
        aux_engine = aux_replicas.engines.engines[0]
        assert aux_engine not in explorer.engines.engines

        experiences, metrics = explorer.explore_step(1)
        assert metrics["rollout/failed_tasks"] == 0 and len(experiences) == 2
        for exp in experiences:
            assert exp.info["aux_engine"] == id(aux_engine)
            assert 2 <= exp.response_length <= 4  # policy: model.min/max_response_tokens
            assert 2 <= exp.info["aux_response_length"] <= 3  # its own max_response_tokens
            # its history is per slot: exactly this workflow's one call
            [recorded] = exp.info["aux_recorded"]
            assert "Grade: " + exp.response_text in recorded

        state = {k: v.clone() for k, v in explorer.engines.engines[0].model.state_dict().items()}
        state["model.embed_tokens.weight"] = torch.zeros_like(state["model.embed_tokens.weight"])
        explorer.load_weights(state, 3)
        assert explorer.model_version == 3
        assert aux_engine.model_version == 0
        assert aux_engine.model.model.embed_tokens.weight.abs().sum() > 0
    finally:
        explorer.close()
