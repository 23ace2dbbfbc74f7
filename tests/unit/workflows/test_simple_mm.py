"""``simple_mm_workflow``: the task's images go before its question in the user message,
each rollout is scored, and an image that cannot be read fails the task in one line
naming taskset, row and key."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from vlm_testing import png_data_url, squares_image

from trinity.rollout.media import MediaError
from trinity.rollout.vision_engine import rollout_engine
from trinity.rollout.wrapper import ModelWrapper
from trinity.types import Task
from trinity.workflows import WORKFLOWS
from trinity.workflows.simple_mm import THINK_SYSTEM_PROMPT, mm_messages

FORMAT = {"prompt_key": "question", "response_key": "answer", "image_key": "images"}


def _task(image: object, **extra: object) -> Task:
    return Task(
        raw={"question": "How many squares?", "answer": "3", "images": image},
        workflow="simple_mm_workflow",
        reward_fn="math_reward",
        repeat_times=2,
        taskset="squares",
        index=4,
        format=dict(FORMAT),
        **extra,  # type: ignore[arg-type]
    )


def test_messages_put_the_images_before_the_question(tmp_path: Path) -> None:
    path = tmp_path / "a.png"
    squares_image(1).save(path)
    task = _task([str(path), png_data_url(squares_image(2))], workflow_args={"with_think": True})
    system, user = mm_messages(task, with_think=True)
    assert system == {"role": "system", "content": THINK_SYSTEM_PROMPT}
    kinds = [part["type"] for part in user["content"]]
    assert kinds == ["image", "image", "text"]
    assert user["content"][2]["text"] == "How many squares?"
    # a row without images stays a text prompt
    assert mm_messages(_task(None))[-1]["content"] == "How many squares?"


def test_an_unreadable_image_fails_the_task_naming_row_and_key() -> None:
    with pytest.raises(
        MediaError,
        match=r"taskset 'squares', row 4, key 'images' \(format.image_key\): image file '/missing.png' does not exist",
    ):
        mm_messages(_task("/missing.png"))


def test_the_workflow_samples_and_scores_each_rollout(tiny_idefics3_dir: Path) -> None:
    with rollout_engine(model_path=str(tiny_idefics3_dir), dtype="float32") as engine:
        model = ModelWrapper(engine, max_response_tokens=4)
        workflow = WORKFLOWS.get("async_simple_mm_workflow")(
            _task(png_data_url(squares_image(3))), model
        )
        exps = asyncio.run(workflow.run_async())
    assert len(exps) == 2 and [e.eid.run for e in exps] == [0, 1]
    assert all(e.reward == 0.0 and e.media is exps[0].media for e in exps)
    assert exps[0].media is not None
