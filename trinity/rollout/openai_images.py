"""Images of OpenAI chat requests (``image_url`` content parts), checked before the
request reaches the model.

A data URL (``data:image/png;base64,...``) is always taken, up to
``openai_api_max_image_bytes`` decoded bytes. A local path or ``file://`` URL is read only
when the endpoint allows it (``openai_api_allow_local_images``): by default a client cannot
make the server open its files. Remote ``http(s)://`` URLs are refused (the server
fetches nothing). Each accepted part becomes an ``{"type": "image", "image": ...}`` part
(the decoded bytes, or the allowed path) for :func:`trinity.rollout.multimodal.render_media_chat`.
"""

from __future__ import annotations

import os
from typing import Any

from trinity.rollout.media import MediaError, decode_data_url
from trinity.rollout.openai_admission import AdmissionLimits
from trinity.rollout.openai_requests import APIError


def accept_images(messages: list[dict[str, Any]], limits: AdmissionLimits) -> list[dict[str, Any]]:
    """``messages`` with their ``image_url`` parts checked and turned into image parts;
    APIError 400 naming the part for one that is refused."""
    out = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts = []
        for j, part in enumerate(content):
            if part.get("type") != "image_url":
                parts.append(part)
                continue
            where = f"messages[{i}].content[{j}].image_url.url"
            parts.append(
                {"type": "image", "image": _image(part["image_url"]["url"], where, limits)}
            )
        out.append({**message, "content": parts})
    return out


def _image(url: str, where: str, limits: AdmissionLimits) -> Any:
    if url.startswith("data:"):
        try:
            return decode_data_url(url, where, limits.max_image_bytes)
        except MediaError as err:
            raise APIError(400, str(err), param=where) from None
    if url.startswith(("http://", "https://")):
        raise APIError(
            400,
            f"{where}: remote image URLs are not fetched; send the image as a data URL",
            param=where,
        )
    if not limits.allow_local_images:
        raise APIError(
            400,
            f"{where}: this endpoint reads no local files; send the image as a data URL "
            f"(or set {limits.key}.openai_api_allow_local_images)",
            param=where,
        )
    path = url.removeprefix("file://")
    if os.path.isfile(path) and os.path.getsize(path) > limits.max_image_bytes:
        raise APIError(
            400, f"{where}: the file is larger than {limits.max_image_bytes} bytes", param=where
        )
    return url
