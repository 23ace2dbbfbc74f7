"""Images through the OpenAI-compatible endpoint: ``image_url`` parts with data URLs are
answered by a vision-language model; a local path only where the endpoint allows it,
a remote URL never, and an image over the size bound is refused."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import openai
import pytest
from vlm_testing import png_data_url, squares_image

from trinity.rollout.openai_admission import AdmissionLimits
from trinity.rollout.vision_engine import rollout_engine
from trinity.rollout.wrapper import ModelWrapper


@pytest.fixture(scope="module")
def engine(tiny_idefics3_dir: Path):
    with rollout_engine(model_path=str(tiny_idefics3_dir), dtype="float32") as built:
        yield built


def _ask(client: openai.OpenAI, url: str, name: str):
    return client.chat.completions.create(
        model=name,
        max_tokens=3,
        temperature=0,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": "How many squares?"},
                ],
            }
        ],
    )


def test_data_urls_are_answered_and_recorded(engine) -> None:
    model = ModelWrapper(engine, enable_history=True)
    try:
        reply = _ask(model.get_openai_client(), png_data_url(squares_image(3)), model.name)
        assert reply.choices[0].finish_reason in ("stop", "length")
        [exp] = model.extract_experience_from_history()
        assert exp.media is not None
        assert exp.response_tokens.tolist() == reply.choices[0].model_extra["token_ids"]
        # the same picture straight through the wrapper decodes the same tokens
        [direct] = model.chat(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": squares_image(3)},
                        {"type": "text", "text": "How many squares?"},
                    ],
                }
            ],
            max_tokens=3,
            temperature=0,
            response_limits=False,
        )
        assert direct.tokens.tolist() == exp.tokens.tolist()
    finally:
        model.close()


def test_local_files_only_when_allowed_and_never_remote_urls(engine, tmp_path: Path) -> None:
    path = tmp_path / "three.png"
    squares_image(3).save(path)
    closed = ModelWrapper(engine)
    try:
        client = closed.get_openai_client()
        for url in (str(path), f"file://{path}"):
            with pytest.raises(openai.BadRequestError, match="reads no local files"):
                _ask(client, url, closed.name)
        with pytest.raises(openai.BadRequestError, match="remote image URLs are not fetched"):
            _ask(client, "https://example.com/cat.png", closed.name)
    finally:
        closed.close()
    limits = dataclasses.replace(
        AdmissionLimits.from_config(), allow_local_images=True, max_image_bytes=64 * 1024
    )
    opened = ModelWrapper(engine)
    try:
        opened.serve_openai(limits=limits)
        client = opened.get_openai_client()
        assert _ask(client, str(path), opened.name).choices
        from PIL import Image

        noise = Image.frombytes("RGB", (200, 200), random.Random(0).randbytes(120_000))
        big = png_data_url(noise)
        with pytest.raises(openai.BadRequestError, match="more than 65536 bytes"):
            _ask(client, big, opened.name)
    finally:
        opened.close()
