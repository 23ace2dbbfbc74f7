"""The GPU weight buffer's layout and the choice of it, without CUDA: the layout and the
views work on any flat byte buffer; the device-to-device copy itself runs in
tests/gpu/ (one GPU shared by trainer and explorer)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from trinity.sync.cuda_slot import cuda_layout, same_gpu, views


def test_views_of_the_laid_out_buffer_give_back_every_tensor() -> None:
    state = {
        "embed": torch.randn(5, 3).to(torch.bfloat16),
        "norm": torch.randn(7),
        "head": torch.arange(6, dtype=torch.int64).view(2, 3),
    }
    entries, size = cuda_layout(state)
    assert all(e.offset % 256 == 0 for e in entries)
    assert size >= entries[-1].offset + entries[-1].nbytes
    buffer = torch.zeros(size, dtype=torch.uint8)
    for name, target in views(buffer, entries).items():
        target.copy_(state[name])
    for name, got in views(buffer, entries).items():
        assert got.dtype == state[name].dtype and torch.equal(got, state[name])


def _config(method: str, gpus: int) -> SimpleNamespace:
    return SimpleNamespace(
        mode="both",
        cluster=SimpleNamespace(gpu_per_node=gpus, node_num=1),
        synchronizer=SimpleNamespace(sync_method=method),
    )


@pytest.mark.parametrize(
    ("method", "gpus", "visible", "expected"),
    [
        ("nccl", 1, True, True),
        ("memory", 1, True, True),
        ("checkpoint", 1, True, False),
        ("nccl", 2, True, False),
        ("nccl", 1, False, False),
    ],
)
def test_one_shared_gpu_takes_the_gpu_buffer_for_nccl_and_memory(
    monkeypatch, method: str, gpus: int, visible: bool, expected: bool
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: visible)
    assert same_gpu(_config(method, gpus)) is expected
