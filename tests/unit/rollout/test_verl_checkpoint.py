"""Merging per-rank checkpoint files into a state dict that loads into the model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from trinity.common.models.utils import (
    CheckpointFormatError,
    load_fsdp_state_dict_from_verl_checkpoint,
)


@pytest.fixture(scope="module")
def state(tiny_model_dir) -> dict[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    generator = torch.Generator().manual_seed(0)
    # move every parameter away from its initial value, so a correct load is visible;
    # parameters() lists the tied embedding once, so lm_head.weight stays equal to it
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator))
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def save_ranks(directory: Path, ranks: list[dict[str, torch.Tensor]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for rank, shard in enumerate(ranks):
        torch.save(shard, directory / f"model_world_size_{len(ranks)}_rank_{rank}.pt")
    return directory


def assert_loads_into_model(merged, state, tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model.load_state_dict(merged)  # strict: every key present, every shape right
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, state[name], rtol=0, atol=0)


def test_world_size_one_is_the_full_state_dict(state, tiny_model_dir, tmp_path):
    actor = save_ranks(tmp_path / "global_step_3" / "actor", [state])
    merged = load_fsdp_state_dict_from_verl_checkpoint(str(actor))
    assert_loads_into_model(merged, state, tiny_model_dir)


def test_two_ranks_of_shards_and_copies_merge(state, tiny_model_dir, tmp_path):
    # matrices are split along dim 0, vectors (norm weights) are copied on both ranks
    ranks: list[dict[str, torch.Tensor]] = [{}, {}]
    for name, tensor in state.items():
        parts = tensor.chunk(2, dim=0) if tensor.dim() == 2 else (tensor, tensor)
        for shard, part in zip(ranks, parts, strict=True):
            shard[name] = part.clone()
    actor = save_ranks(tmp_path / "actor", ranks)
    merged = load_fsdp_state_dict_from_verl_checkpoint(actor)
    assert merged["model.embed_tokens.weight"].shape == state["model.embed_tokens.weight"].shape
    assert_loads_into_model(merged, state, tiny_model_dir)


def test_config_tells_equal_shards_from_copies(state, tiny_model_dir, tmp_path):
    # every tensor sharded; a norm weight of ones gives two identical shards, which only
    # the saved config can tell apart from a copy. Rank 1's norm shard carries one
    # padding element, as an uneven last shard does.
    state = dict(state)
    state["model.norm.weight"] = torch.ones(64)
    ranks: list[dict[str, torch.Tensor]] = [{}, {}]
    for name, tensor in state.items():
        for shard, part in zip(ranks, tensor.chunk(2, dim=0), strict=True):
            shard[name] = part.clone()
    ranks[1]["model.norm.weight"] = torch.cat([ranks[1]["model.norm.weight"], torch.zeros(1)])
    actor = save_ranks(tmp_path / "actor", ranks)
    shutil.copytree(tiny_model_dir, actor / "huggingface")
    merged = load_fsdp_state_dict_from_verl_checkpoint(actor)
    assert merged["model.norm.weight"].shape == (64,)
    assert_loads_into_model(merged, state, tiny_model_dir)


def test_missing_rank_file_is_reported(state, tmp_path):
    actor = save_ranks(tmp_path / "actor", [state, state])
    (actor / "model_world_size_2_rank_1.pt").unlink()
    with pytest.raises(CheckpointFormatError, match=r"missing rank files \[1\]"):
        load_fsdp_state_dict_from_verl_checkpoint(actor)


def test_directory_without_rank_files_is_reported(tmp_path):
    with pytest.raises(CheckpointFormatError, match="global_step_N/actor"):
        load_fsdp_state_dict_from_verl_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_fsdp_state_dict_from_verl_checkpoint(tmp_path / "absent")


def test_incompatible_shards_are_reported(tmp_path):
    actor = save_ranks(tmp_path / "actor", [{"w": torch.zeros(2, 3)}, {"w": torch.ones(2, 4)}])
    with pytest.raises(CheckpointFormatError, match="neither identical nor dim-0 shards"):
        load_fsdp_state_dict_from_verl_checkpoint(actor)
