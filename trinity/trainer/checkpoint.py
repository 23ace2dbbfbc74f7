"""Checkpoint layout on disk, written atomically.

    <job_dir>/
      global_step_<N>/actor/
        model_world_size_<W>_rank_<r>.pt      parameters (this rank's part)
        optim_world_size_<W>_rank_<r>.pt      optimizer state
        extra_state_world_size_<W>_rank_<r>.pt  LR schedule, RNG states, step
        fsdp_config.json                      {"world_size": W, ...}
        huggingface/                          config + tokenizer (+ model.safetensors
                                              after ``trinity convert``)
      latest_checkpointed_iteration.txt       newest complete full checkpoint
      latest_state_dict_iteration.txt         newest weights-only save (checkpoint sync)
      trainer_meta.json, explorer_meta.json

A checkpoint is first written to a temporary sibling directory and renamed into place;
the "latest" pointers are replaced atomically after that. A crash mid-save leaves the
previous checkpoint and pointers untouched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

LATEST_CHECKPOINT = "latest_checkpointed_iteration.txt"
LATEST_STATE_DICT = "latest_state_dict_iteration.txt"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


def step_dir(job_dir: Path, step: int) -> Path:
    return Path(job_dir) / f"global_step_{step}"


def shard_name(kind: str, world_size: int, rank: int) -> str:
    return f"{kind}_world_size_{world_size}_rank_{rank}.pt"


def write_text_atomic(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True))


def read_json(path: Path) -> dict[str, Any] | None:
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def read_latest(job_dir: Path, pointer: str = LATEST_CHECKPOINT) -> int | None:
    path = Path(job_dir) / pointer
    if not path.exists():
        return None
    text = path.read_text().strip()
    return int(text) if text.isdigit() else None


def list_steps(job_dir: Path) -> list[int]:
    job_dir = Path(job_dir)
    if not job_dir.exists():
        return []
    steps = [int(m.group(1)) for p in job_dir.iterdir() if (m := _STEP_DIR.match(p.name))]
    return sorted(steps)


def save_actor_checkpoint(
    job_dir: Path,
    step: int,
    *,
    model_state: dict[str, torch.Tensor],
    optim_state: dict[str, Any] | None,
    extra_state: dict[str, Any] | None,
    hf_save: Any | None = None,
    pointer: str = LATEST_CHECKPOINT,
) -> Path:
    """Write a one-rank ``global_step_<step>/actor`` atomically and move ``pointer`` to ``step``.

    ``hf_save(dir)`` writes the Hugging Face config and tokenizer into ``huggingface/``.
    """
    staging = begin_checkpoint(job_dir, step)
    try:
        write_rank_shards(staging, 1, 0, model_state, optim_state, extra_state)
        return commit_checkpoint(job_dir, step, staging, 1, hf_save=hf_save, pointer=pointer)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def begin_checkpoint(job_dir: Path, step: int) -> Path:
    """A fresh temporary sibling of ``global_step_<step>`` that the ranks write into."""
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=job_dir, prefix=f".global_step_{step}."))
    (staging / "actor").mkdir()
    return staging


def write_rank_shards(
    staging: Path,
    world_size: int,
    rank: int,
    model_state: dict[str, torch.Tensor],
    optim_state: dict[str, Any] | None,
    extra_state: dict[str, Any] | None,
) -> None:
    """Rank ``rank``'s model, optimizer and extra state files (plain tensors only)."""
    import torch  # here: the driver reads this module's pointers and never imports torch

    actor = Path(staging) / "actor"
    torch.save(model_state, actor / shard_name("model", world_size, rank))
    if optim_state is not None:
        torch.save(optim_state, actor / shard_name("optim", world_size, rank))
    if extra_state is not None:
        torch.save(extra_state, actor / shard_name("extra_state", world_size, rank))


def commit_checkpoint(
    job_dir: Path,
    step: int,
    staging: Path,
    world_size: int,
    *,
    hf_save: Any | None = None,
    pointer: str = LATEST_CHECKPOINT,
) -> Path:
    """Once every rank has written its files: rename ``staging`` into place, move ``pointer``."""
    job_dir = Path(job_dir)
    actor = Path(staging) / "actor"
    missing = [
        r for r in range(world_size) if not (actor / shard_name("model", world_size, r)).exists()
    ]
    if missing:
        raise FileNotFoundError(f"ranks {missing} wrote no model file into {actor}")
    (actor / "fsdp_config.json").write_text(json.dumps({"world_size": world_size}))
    if hf_save is not None:
        hf_save(actor / "huggingface")
    final = step_dir(job_dir, step) / "actor"
    if final.exists():  # a weights-only save of the same step is superseded
        shutil.rmtree(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(actor, final)
    shutil.rmtree(staging, ignore_errors=True)
    write_text_atomic(job_dir / pointer, str(step))
    return final


def checkpoint_world_size(job_dir: Path, step: int) -> int:
    """The number of trainer ranks that wrote ``global_step_<step>``."""
    config = read_json(step_dir(job_dir, step) / "actor" / "fsdp_config.json")
    return int(config["world_size"]) if config else 1


def prune_checkpoints(job_dir: Path, keep: int | None) -> list[int]:
    """Delete the oldest full checkpoints beyond ``keep`` (None or <= 0 keeps all)."""
    if not keep or keep <= 0:
        return []
    latest = read_latest(job_dir)
    complete = [s for s in list_steps(job_dir) if _is_full(job_dir, s)]
    removed = []
    for step in complete[:-keep]:
        if step != latest:
            shutil.rmtree(step_dir(job_dir, step), ignore_errors=True)
            removed.append(step)
    return removed


def _is_full(job_dir: Path, step: int) -> bool:
    actor = step_dir(job_dir, step) / "actor"
    return any(p.name.startswith("optim_world_size_") for p in actor.glob("*.pt"))


def load_actor_shard(job_dir: Path, step: int, kind: str, world_size: int = 1, rank: int = 0):
    import torch

    path = step_dir(job_dir, step) / "actor" / shard_name(kind, world_size, rank)
    return torch.load(path, map_location="cpu", weights_only=True)
