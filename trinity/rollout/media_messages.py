"""Chat messages with images: the image parts split off for a processor, and a copy that
JSON can store (and ``trinity view`` can show).

Image parts are ``{"type": "image", "image": X}`` (X as
:func:`trinity.rollout.media.load_image` reads it) or OpenAI's
``{"type": "image_url", "image_url": {"url": ...}}``; video parts
``{"type": "video", "video": [frames]}``.

    plain, images, videos = split_media(messages)  # plain: {"type": "image"} placeholders
    stored = json_messages(messages)  # thumbnails (data URLs) or paths instead of images
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity.rollout.media import load_image, load_images


def split_media(
    messages: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[Any], list[Any]]:
    """Messages whose image parts are bare ``{"type": "image"}`` placeholders, and the
    images and videos they held, in order. Parts may be ``{"type": "image", "image": X}``
    or OpenAI's ``{"type": "image_url", "image_url": {"url": ...}}`` (URLs as
    :func:`trinity.rollout.media.load_image` reads them; the OpenAI endpoint checks them
    first)."""
    images: list[Any] = []
    videos: list[Any] = []
    out = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            where = f"messages[{i}].content[{j}]"
            if kind == "image":
                images.append(load_image(part.get("image", part.get("url")), where))
                parts.append({"type": "image"})
            elif kind == "image_url":
                url = part.get("image_url")
                url = url.get("url") if isinstance(url, dict) else url
                images.append(load_image(url, where))
                parts.append({"type": "image"})
            elif kind == "video":
                videos.append(load_images(part.get("video"), where))
                parts.append({"type": "video"})
            else:
                parts.append(part)
        out.append({**message, "content": parts})
    return out, images, videos


def has_media(messages: list[dict[str, Any]]) -> bool:
    """Whether any message holds an image or video part."""
    return any(
        isinstance(part, dict) and part.get("type") in ("image", "image_url", "video")
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
    )


def json_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each image part's payload replaced by something JSON can store
    and a viewer can show: a path or URL as given (a ``data:`` URL, bytes or a PIL image
    becomes a PNG thumbnail data URL of at most :data:`THUMBNAIL_SIDE` pixels a side)."""
    out = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(dict(message))
            continue
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image_url":
                url = part.get("image_url")
                part = {"type": "image", "image": url.get("url") if isinstance(url, dict) else url}
                kind = "image"
            if kind == "image":
                parts.append({"type": "image", "image": image_reference(part.get("image"))})
            elif kind == "video":
                parts.append({"type": "video", "frames": len(part.get("video") or [])})
            else:
                parts.append(part)
        out.append({**message, "content": parts})
    return out


THUMBNAIL_SIDE = 128


def image_reference(value: Any) -> str | None:
    """A short JSON-able reference to an image: its path or ``file://`` URL, else a PNG
    thumbnail as a data URL (None when the image cannot be read)."""
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str) and not value.startswith("data:"):
        return value
    import base64
    import io

    try:
        image = load_image(value, "image")
    except ValueError:
        return None
    image = image.copy()
    image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
