"""Merging the per-rank model files of a trainer checkpoint into one full state dict
(for loading it outside the framework; the user docs name the import path
``trinity.common.models.utils``).

A checkpoint's ``global_step_N/actor`` directory holds one
``model_world_size_{W}_rank_{r}.pt`` file per trainer rank, each a dict mapping
parameter names to tensors. A tensor is either a full copy (the same on every rank) or
rank ``r``'s slice along dim 0; :func:`load_fsdp_state_dict_from_verl_checkpoint`
merges them into one full state dict. When the directory also holds the model config
(``huggingface/config.json`` or ``config.json``), full shapes come from it; otherwise
tensors equal on all ranks are taken as copies.

    model = AutoModelForCausalLM.from_pretrained(model_path)
    model.load_state_dict(load_fsdp_state_dict_from_verl_checkpoint(ckpt_path))
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

_RANK_FILE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")


class CheckpointFormatError(ValueError):
    """The checkpoint directory does not hold a complete, consistent set of rank files."""


def load_fsdp_state_dict_from_verl_checkpoint(ckpt_path: str | Path) -> dict[str, torch.Tensor]:
    """Merge the per-rank model files of a checkpoint into a full state dict.

    Args:
        ckpt_path: a ``global_step_N/actor`` directory with ``model_world_size_{W}_rank_{r}.pt``.

    Returns:
        parameter name -> full tensor. Copies are taken once; shards are concatenated
        along dim 0 in rank order.

    Raises:
        FileNotFoundError: the directory does not exist.
        CheckpointFormatError: rank files are missing, mixed, or do not fit together.
    """
    directory = Path(ckpt_path)
    if not directory.is_dir():
        raise FileNotFoundError(f"Checkpoint directory {directory} does not exist")
    shards = _rank_files(directory)
    world_size = len(shards)
    states = [_load(path) for path in shards]
    names = list(states[0])
    for rank, state in enumerate(states[1:], start=1):
        if set(state) != set(names):
            differ = sorted(set(state) ^ set(names))
            raise CheckpointFormatError(
                f"rank {rank} of {directory} has different parameter names than rank 0: {differ[:5]}"
            )
    if world_size == 1:
        return states[0]
    shapes = _expected_shapes(directory)
    merged: dict[str, torch.Tensor] = {}
    for name in names:
        parts = [state[name] for state in states]
        full = shapes.get(name) if shapes is not None else None
        if full is not None and parts[0].shape == full:
            merged[name] = parts[0]  # replicated on every rank
        elif full is None and all(
            p.shape == parts[0].shape and torch.equal(p, parts[0]) for p in parts[1:]
        ):
            # without a config, equal tensors count as copies: a shard set that happens
            # to be equal (e.g. a norm weight of ones) needs the config to be told apart
            merged[name] = parts[0]
        else:
            merged[name] = _concat_shards(name, parts, full)
    return merged


def _concat_shards(name: str, parts: list[torch.Tensor], full: torch.Size | None) -> torch.Tensor:
    try:
        tensor = torch.cat(parts, dim=0)
    except RuntimeError as error:
        raise CheckpointFormatError(
            f"{name}: rank tensors are neither identical nor dim-0 shards "
            f"(shapes {[tuple(p.shape) for p in parts]})"
        ) from error
    if full is not None:
        if tensor.shape[1:] != full[1:] or tensor.shape[0] < full[0]:
            raise CheckpointFormatError(
                f"{name}: shards concatenate to {tuple(tensor.shape)}, the model expects {tuple(full)}"
            )
        tensor = tensor[: full[0]]  # drop the padding of an uneven last shard
    return tensor


def _rank_files(directory: Path) -> list[Path]:
    """The rank files of one world size, in rank order; errors if any is missing."""
    found: dict[int, dict[int, Path]] = {}
    for path in directory.iterdir():
        match = _RANK_FILE.match(path.name)
        if match:
            world, rank = int(match.group(1)), int(match.group(2))
            found.setdefault(world, {})[rank] = path
    if not found:
        raise CheckpointFormatError(
            f"No model_world_size_*_rank_*.pt files in {directory}; pass the "
            "global_step_N/actor directory of a checkpoint"
        )
    if len(found) > 1:
        raise CheckpointFormatError(
            f"{directory} mixes files of world sizes {sorted(found)}; keep one set"
        )
    [(world_size, ranks)] = found.items()
    missing = sorted(set(range(world_size)) - set(ranks))
    if missing:
        raise CheckpointFormatError(
            f"{directory} is missing rank files {missing} of world size {world_size}"
        )
    return [ranks[r] for r in range(world_size)]


def _load(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise CheckpointFormatError(f"{path} holds a {type(state).__name__}, not a state dict")
    return state


def _expected_shapes(directory: Path) -> dict[str, torch.Size] | None:
    """Full parameter shapes from the model config saved next to the rank files.

    Built on the meta device, so no memory is allocated. None when there is no config.
    """
    for candidate in (directory / "huggingface", directory):
        if (candidate / "config.json").is_file():
            from transformers import AutoConfig

            from trinity.rollout.multimodal import config_model_class

            config = AutoConfig.from_pretrained(candidate)
            with torch.device("meta"):
                model = config_model_class(config).from_config(config)
            return {name: t.shape for name, t in model.state_dict().items()}
    return None
