"""The images' model inputs of stored experiences (``Experience.media``), kept once per
prompt however many rollouts share them.

An experience row or line stores only the media's digest (``media_digest``); the tensors
are stored once per digest beside it:

- SQL: a table ``<experience table>_media`` (digest, tensor bytes, their dtypes and
  shapes as JSON), written in the same transaction as the experiences;
- JSON lines: one safetensors file per digest in the directory ``<file>.media/``.

Readers give experiences with the same digest one shared :class:`MediaInputs` (a small
cache of the latest digests), so a group read back shares its pixel values again.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import torch

from trinity.buffer.codec import tensor_from_bytes, tensor_to_bytes
from trinity.rollout.multimodal import MediaInputs
from trinity.types import Experience

_CACHED = 64  # digests a reader keeps decoded


def media_to_bytes(media: MediaInputs) -> tuple[bytes, dict[str, Any]]:
    """All tensors of ``media`` as one blob, and ``{name: {dtype, shape, start, end}}``."""
    parts, meta, start = [], {}, 0
    for name in sorted(media.tensors):
        data, info = tensor_to_bytes(media.tensors[name])
        meta[name] = {**info, "start": start, "end": start + len(data)}
        parts.append(data)
        start += len(data)
    return b"".join(parts), meta


def media_from_bytes(blob: bytes, meta: dict[str, Any], digest: str) -> MediaInputs:
    tensors = {
        name: tensor_from_bytes(blob[info["start"] : info["end"]], info)
        for name, info in meta.items()
    }
    return MediaInputs(tensors, digest)


def distinct_media(exps: list[Experience]) -> dict[str, MediaInputs]:
    """The media of ``exps`` by digest, each once."""
    return {e.media.digest: e.media for e in exps if e.media is not None}


class MediaCache:
    """The latest decoded media by digest, so readers hand out shared objects."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, MediaInputs] = OrderedDict()

    def get(self, digest: str) -> MediaInputs | None:
        item = self._items.get(digest)
        if item is not None:
            self._items.move_to_end(digest)
        return item

    def put(self, media: MediaInputs) -> MediaInputs:
        self._items[media.digest] = media
        self._items.move_to_end(media.digest)
        while len(self._items) > _CACHED:
            self._items.popitem(last=False)
        return media


class MediaDir:
    """Media of a JSON-lines experience file: ``<file>.media/<digest>.safetensors``."""

    def __init__(self, jsonl_path: str) -> None:
        self.root = jsonl_path + ".media"
        self.cache = MediaCache()

    def _file(self, digest: str) -> str:
        if not digest.isalnum():
            raise ValueError(f"media digest {digest!r} is not alphanumeric")
        return os.path.join(self.root, f"{digest}.safetensors")

    def put(self, exps: list[Experience]) -> None:
        """Write the media of ``exps`` not stored yet (atomically, one file each)."""
        from safetensors.torch import save_file

        for digest, media in distinct_media(exps).items():
            path = self._file(digest)
            if os.path.exists(path):
                continue
            os.makedirs(self.root, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            tensors = {k: v.detach().cpu().contiguous() for k, v in media.tensors.items()}
            save_file(tensors, tmp)
            os.replace(tmp, path)

    def get(self, digest: str) -> MediaInputs:
        """The media stored under ``digest`` (FileNotFoundError naming the file)."""
        cached = self.cache.get(digest)
        if cached is not None:
            return cached
        from safetensors.torch import load_file

        path = self._file(digest)
        if not os.path.exists(path):
            raise FileNotFoundError(f"the experience's images are missing: no file {path}")
        return self.cache.put(MediaInputs(load_file(path), digest))


def same_media(a: MediaInputs, b: MediaInputs) -> bool:
    """Whether two media hold equal tensors (tests and checks)."""
    return a.tensors.keys() == b.tensors.keys() and all(
        torch.equal(a.tensors[k], b.tensors[k]) for k in a.tensors
    )
