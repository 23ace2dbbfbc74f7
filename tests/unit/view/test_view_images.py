"""``trinity view`` shows a prompt's images: the thumbnails its messages keep as data
URLs as images, paths as text; the plain-text view lists them."""

from __future__ import annotations

from pathlib import Path

import torch

from trinity.buffer.jsonl import JsonlWriter
from trinity.rollout.media_messages import json_messages
from trinity.types import Experience
from trinity.view.records import ExperienceSource
from trinity.view.render import detail_html, experience_text


def test_the_viewer_shows_the_prompts_images(tmp_path: Path) -> None:
    from PIL import Image

    picture = Image.new("RGB", (300, 200), "red")
    messages = json_messages(
        [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": picture},
                    {"type": "image", "image": "/data/cat.png"},
                    {"type": "text", "text": "What is it?"},
                ],
            }
        ]
    )
    exp = Experience(tokens=torch.arange(6), prompt_length=4, messages=messages, prompt_text="q")
    path = tmp_path / "experiences.jsonl"
    with JsonlWriter(path) as writer:
        writer.write([exp])
    source = ExperienceSource(str(path))
    [view] = source.page(0, 1)
    thumbnail, file = view.images
    assert thumbnail.startswith("data:image/png;base64,") and file == "/data/cat.png"
    page = detail_html(view, 1)
    assert f"<img class='prompt-image' src='{thumbnail}'>" in page
    assert "<code>/data/cat.png</code>" in page
    assert "images: data:image/png;base64," in experience_text(view)
    # the thumbnail is small: at most 128 pixels a side
    import base64
    import io

    small = Image.open(io.BytesIO(base64.b64decode(thumbnail.split(",", 1)[1])))
    assert max(small.size) == 128
