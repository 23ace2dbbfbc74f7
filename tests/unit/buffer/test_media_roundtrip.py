"""Experiences with images (``Experience.media``) through the SQL and JSON-lines
buffers: the tensors come back exactly, once per prompt in storage, and the rollouts of
one prompt read back share one object again."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trinity.buffer.jsonl import JsonlReader, JsonlWriter
from trinity.buffer.media_store import same_media
from trinity.buffer.sql_storage import SQLExperienceStorage
from trinity.rollout.multimodal import MediaInputs
from trinity.types import EID, Experience


def _group(task: int, seed: int, n: int = 3) -> list[Experience]:
    g = torch.Generator().manual_seed(seed)
    media = MediaInputs(
        {
            "pixel_values": torch.randn(16, 12, generator=g),
            "image_grid_thw": torch.tensor([[1, 4, 4]]),
        }
    )
    return [
        Experience(
            tokens=torch.arange(6 + r),
            prompt_length=4,
            logprobs=torch.zeros(2 + r),
            reward=float(r),
            eid=EID(batch=1, task=task, run=r),
            messages=[{"role": "user", "content": [{"type": "image", "image": "a.png"}]}],
            media=media,
        )
        for r in range(n)
    ]


def _check(read: list[Experience], written: list[Experience]) -> None:
    assert len(read) == len(written)
    for got, want in zip(read, written, strict=True):
        assert got.media is not None and got.media.digest == want.media.digest
        assert same_media(got.media, want.media)
        assert got.messages == want.messages
    # one object per prompt again
    assert read[0].media is read[1].media is read[2].media
    assert read[3].media is not read[0].media


def test_sql_stores_each_prompts_images_once(tmp_path: Path) -> None:
    exps = _group(0, 1) + _group(1, 2)
    text_only = Experience(tokens=torch.arange(5), prompt_length=3, eid=EID(batch=1, task=2))
    storage = SQLExperienceStorage(str(tmp_path / "buffer.db"))
    storage.write(exps[:4])
    storage.write(exps[4:] + [text_only])  # the second group's image is stored already
    with Session(storage.engine) as sess:
        assert sess.scalar(select(func.count()).select_from(storage.media_model)) == 2
    read = storage.read_new(10)
    _check(read[:6], exps)
    assert read[6].media is None
    storage.close()
    # a fresh reader of the same file
    again = SQLExperienceStorage(str(tmp_path / "buffer.db"))
    _check(again.read(6), exps)
    again.close()


def test_jsonl_keeps_the_images_beside_the_lines(tmp_path: Path) -> None:
    exps = _group(0, 1) + _group(1, 2)
    path = tmp_path / "experiences.jsonl"
    with JsonlWriter(path) as writer:
        writer.write(exps)
    assert len(list((tmp_path / "experiences.jsonl.media").iterdir())) == 2
    _check(JsonlReader(path).read_new(10), exps)


def test_a_line_whose_images_are_gone_is_a_malformed_row(tmp_path: Path) -> None:
    from trinity.buffer.errors import MalformedRowError

    path = tmp_path / "experiences.jsonl"
    with JsonlWriter(path) as writer:
        writer.write(_group(0, 1))
    for file in (tmp_path / "experiences.jsonl.media").iterdir():
        file.unlink()
    with pytest.raises(MalformedRowError, match="line 1: .*images are missing"):
        JsonlReader(path).read_new(3)
