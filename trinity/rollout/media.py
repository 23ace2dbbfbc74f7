"""Images of a task or a chat message, loaded with Pillow from what a dataset row holds.

A row's ``format.image_key`` column may hold one image or a list of them, each as a
local path, a ``file://`` URL, a ``data:image/...;base64,`` URL, raw bytes, a
``datasets`` Image value (``{"bytes": ..., "path": ...}``) or a PIL image. Every image is
decoded (``Image.load``) and converted to RGB here, so a missing or unreadable file fails
where the row is read, in one line naming the row and the key::

    images = load_images(row["images"], where="taskset 'shapes', row 3, key 'images'")

``format.video_key`` columns hold videos as lists of frames (each frame an image as
above); a video is a list of RGB frames.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

# a decoded image larger than this (width x height) is refused: Pillow's own bomb guard
# warns only, and a rollout engine would spend minutes in the image processor
MAX_IMAGE_PIXELS = 64 * 1024 * 1024


class MediaError(ValueError):
    """An image (or video frame) that cannot be read; the message names where it was."""


def load_images(value: Any, where: str) -> list[Any]:
    """The RGB PIL images of ``value`` (one image or a list of them); ``where`` names the
    row and key for the error message."""
    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    return [
        load_image(item, f"{where}[{i}]" if len(items) > 1 else where)
        for i, item in enumerate(items)
    ]


def load_videos(value: Any, where: str) -> list[list[Any]]:
    """Videos as lists of RGB frames: ``value`` is one video (a list of frames) or a list
    of videos (a list of lists)."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not value:
        raise MediaError(f"{where}: a video must be a non-empty list of frames, got {_kind(value)}")
    videos = value if all(isinstance(v, (list, tuple)) for v in value) else [value]
    return [load_images(list(frames), f"{where}[{i}]") for i, frames in enumerate(videos)]


def load_image(value: Any, where: str) -> Any:
    """One RGB PIL image from a path, URL, bytes, datasets Image dict or PIL image."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(value, Image.Image):
        return _checked(value, where)
    data = _image_bytes(value, where)
    try:
        image = Image.open(io.BytesIO(data))
        _check_size(image, where)
        image.load()
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise MediaError(f"{where}: not a readable image ({type(exc).__name__}: {exc})") from None
    return image.convert("RGB")


def _checked(image: Any, where: str) -> Any:
    _check_size(image, where)
    return image.convert("RGB") if image.mode != "RGB" else image


def _check_size(image: Any, where: str) -> None:
    width, height = image.size
    if width < 1 or height < 1 or width * height > MAX_IMAGE_PIXELS:
        raise MediaError(
            f"{where}: image of {width}x{height} pixels; at most {MAX_IMAGE_PIXELS} pixels "
            "and at least 1x1 are accepted"
        )


def _image_bytes(value: Any, where: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        # a datasets Image column: bytes when embedded, else a path
        if value.get("bytes"):
            return bytes(value["bytes"])
        if value.get("path"):
            return _image_bytes(str(value["path"]), where)
        raise MediaError(
            f"{where}: an image dict needs 'bytes' or 'path', got keys {sorted(value)}"
        )
    if isinstance(value, Path):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise MediaError(f"{where}: expected an image path, URL or bytes, got {_kind(value)}")
    if value.startswith("data:"):
        return decode_data_url(value, where)
    if value.startswith("file://"):
        return _read(Path(unquote(urlparse(value).path)), where)
    if "://" in value:
        raise MediaError(
            f"{where}: '{value[:80]}' is a remote URL; images are read from local paths, "
            "file:// URLs, data URLs or bytes (download it first)"
        )
    return _read(Path(value).expanduser(), where)


def decode_data_url(url: str, where: str, max_bytes: int | None = None) -> bytes:
    """The bytes of a ``data:[<type>];base64,<data>`` URL; at most ``max_bytes`` decoded."""
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64"):
        raise MediaError(f"{where}: a data URL must be 'data:<type>;base64,<data>'")
    if max_bytes is not None and len(payload) * 3 // 4 > max_bytes:
        raise MediaError(f"{where}: data URL holds more than {max_bytes} bytes")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError(f"{where}: data URL is not valid base64") from None


def _read(path: Path, where: str) -> bytes:
    if not path.is_file():
        raise MediaError(f"{where}: image file {str(path)!r} does not exist")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise MediaError(
            f"{where}: cannot read image file {str(path)!r} ({exc.strerror})"
        ) from None


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def row_media(
    row: dict[str, Any], fmt: dict[str, Any], where: str
) -> tuple[list[Any], list[list[Any]]]:
    """(images, videos) of a task row under its format's ``image_key`` / ``video_key``;
    a key the format does not name, or a null value, gives none."""
    images: list[Any] = []
    videos: list[list[Any]] = []
    image_key, video_key = fmt.get("image_key"), fmt.get("video_key")
    if image_key:
        images = load_images(row.get(image_key), f"{where}, key '{image_key}' (format.image_key)")
    if video_key:
        videos = load_videos(row.get(video_key), f"{where}, key '{video_key}' (format.video_key)")
    return images, videos


def media_parts(images: Sequence[Any], videos: Sequence[list[Any]]) -> list[dict[str, Any]]:
    """Chat content parts for ``images`` and ``videos``, in that order (before the text)."""
    return [{"type": "image", "image": im} for im in images] + [
        {"type": "video", "video": frames} for frames in videos
    ]
