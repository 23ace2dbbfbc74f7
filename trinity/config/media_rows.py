"""The images of a taskset's first rows, read before a run starts (``format.image_key``,
``format.video_key``): a missing or unreadable image fails ``trinity run`` (and
``--dry-run``) in one line naming the taskset, the row and the key.

Only the first :data:`ROWS_CHECKED` rows of a file taskset are read here; a later row
whose image cannot be read fails its task during the run (counted with the other failed
tasks), not the run.
"""

from __future__ import annotations

from typing import Any

from trinity.config.errors import ConfigError

ROWS_CHECKED = 3


def check_media_rows(prefix: str, taskset: Any) -> None:
    """Read and decode the images (and video frames) of ``taskset``'s first rows."""
    fmt = taskset.format
    keys = {"image_key": fmt.image_key, "video_key": fmt.video_key}
    if not any(keys.values()) or taskset.storage_type != "file" or not taskset.path:
        return
    from trinity.buffer.file_reader import find_data_files, read_file
    from trinity.rollout.media import MediaError, row_media

    try:
        files = find_data_files(taskset.path, taskset.split or "train", taskset.subset_name)
        rows = read_file(files[0], None, None, False)[:ROWS_CHECKED] if files else []
    except (OSError, ValueError):
        return  # check_data_path reports a dataset it cannot find
    for i, row in enumerate(rows):
        try:
            row_media(row, {k: v for k, v in keys.items() if v}, f"row {i} of {files[0]}")
        except MediaError as err:
            key = "image_key" if f"'{fmt.image_key}'" in str(err) else "video_key"
            raise ConfigError(f"{prefix}.format.{key}", str(err), value=keys[key]) from None


def check_media_model(prefix: str, taskset: Any, model_path: str) -> None:
    """A taskset or dataset with images needs a vision-language policy: refuse a local
    text model directory (a hub id or built-in name is resolved later, by the run)."""
    fmt = taskset.format
    if not (fmt.image_key or fmt.video_key) or not model_path:
        return
    from pathlib import Path

    from trinity.rollout.multimodal import is_vision_language

    path = Path(model_path).expanduser()
    if (path / "config.json").is_file() and not is_vision_language(path):
        key = "image_key" if fmt.image_key else "video_key"
        raise ConfigError(
            f"{prefix}.format.{key}",
            f"rows with images need a vision-language model, but model.model_path "
            f"'{model_path}' is a text model",
            value=getattr(fmt, key),
            valid="an image-text-to-text model directory (with its processor), or no image key",
        )
