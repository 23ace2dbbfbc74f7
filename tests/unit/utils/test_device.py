"""The compute device and every CPU-only path's gate, decided without CUDA.

The GPU paths themselves run in tests/gpu/ (marker ``gpu``) on a machine with CUDA;
here each decision is made with a device argument ("cuda" as a ``torch.device``, or
meta tensors standing for tensors that are not on the CPU).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from trinity.rollout.decoding import DecodeEntry
from trinity.rollout.engine import kv_bytes_per_token, kv_cache_budget, row_chunks
from trinity.rollout.fast_decode import cpu_paths
from trinity.rollout.sampling import SamplingParams
from trinity.trainer import checkpoint as ckpt
from trinity.trainer import distributed
from trinity.trainer.fused_layers import _fusable
from trinity.trainer.model_setup import bf16_parameters
from trinity.trainer.precision import kernels_apply
from trinity.utils import device as dev


def _config(gpu_per_node: int, node_num: int = 1, mode: str = "both") -> SimpleNamespace:
    return SimpleNamespace(
        mode=mode, cluster=SimpleNamespace(gpu_per_node=gpu_per_node, node_num=node_num)
    )


def _cuda_visible(monkeypatch: pytest.MonkeyPatch, visible: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: visible)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_a_cpu_config_computes_on_the_cpu_even_where_cuda_is_visible(monkeypatch) -> None:
    _cuda_visible(monkeypatch, True)
    assert dev.compute_device(_config(0).cluster) == torch.device("cpu")


def test_a_gpu_config_computes_on_the_cpu_where_cuda_is_absent(monkeypatch) -> None:
    # inside a Ray actor that Ray gave no GPU, CUDA_VISIBLE_DEVICES hides every device
    _cuda_visible(monkeypatch, False)
    assert dev.compute_device(_config(1).cluster) == torch.device("cpu")


def test_a_gpu_config_computes_on_the_current_cuda_device(monkeypatch) -> None:
    _cuda_visible(monkeypatch, True)
    assert dev.compute_device(_config(2).cluster) == torch.device("cuda", 0)
    assert dev.is_cuda(dev.compute_device(_config(2).cluster))
    assert not dev.is_cuda("cpu") and not dev.is_cuda(None)


@pytest.mark.parametrize(
    ("gpu_per_node", "node_num", "mode", "visible", "shared"),
    [
        (1, 1, "both", True, True),
        (1, 1, "both", False, False),
        (2, 1, "both", True, False),
        (1, 2, "both", True, False),
        (1, 1, "train", True, False),
        (0, 1, "both", True, False),
    ],
)
def test_trainer_and_explorer_share_the_gpu_of_a_one_gpu_run(
    monkeypatch, gpu_per_node: int, node_num: int, mode: str, visible: bool, shared: bool
) -> None:
    _cuda_visible(monkeypatch, visible)
    assert dev.shares_one_gpu(_config(gpu_per_node, node_num, mode)) is shared


# ---------------------------------------------------------------- CPU-only kernels
def test_the_decoder_uses_cpu_kernels_and_packing_on_the_cpu_only() -> None:
    fuse, _ = cpu_paths(torch.device("cpu"), torch.bfloat16)
    assert fuse
    assert cpu_paths(torch.device("cuda"), torch.bfloat16) == (False, False)
    assert cpu_paths(torch.device("cuda", 0), torch.bfloat16, pack=True) == (False, False)
    assert cpu_paths(torch.device("cpu"), torch.float32) == (False, False)
    assert cpu_paths(torch.device("cpu"), torch.bfloat16, pack=False) == (True, False)


def test_the_fused_training_layers_and_optimizer_kernels_skip_tensors_off_the_cpu() -> None:
    on_cpu = torch.zeros(4, dtype=torch.bfloat16)
    elsewhere = torch.zeros(4, dtype=torch.bfloat16, device="meta")
    assert _fusable(on_cpu, on_cpu)
    assert not _fusable(on_cpu, elsewhere)
    assert kernels_apply([on_cpu], torch.bfloat16)
    assert not kernels_apply([on_cpu, elsewhere], torch.bfloat16)
    assert not kernels_apply([on_cpu], torch.float32)


def test_the_logprob_kernel_skips_logits_off_the_cpu() -> None:
    from trinity.algorithm.utils import _use_kernel

    logits = torch.zeros((1, 2, 8), dtype=torch.bfloat16, device="meta")
    assert not _use_kernel(logits, None)


# ---------------------------------------------------------------- precision
@pytest.mark.parametrize(
    ("dtype", "lora", "world_size", "allowed", "expected"),
    [
        (torch.bfloat16, False, 1, True, True),
        (torch.bfloat16, True, 1, True, False),
        (torch.bfloat16, False, 2, True, False),
        (torch.bfloat16, False, 1, False, False),
        (torch.float32, False, 1, True, False),
    ],
)
def test_bf16_parameters_follow_one_rule_on_every_device(
    dtype: torch.dtype, lora: bool, world_size: int, allowed: bool, expected: bool
) -> None:
    assert bf16_parameters(dtype, lora=lora, world_size=world_size, allowed=allowed) is expected


def test_a_gpu_run_keeps_bf16_on_a_cpu_without_bf16_matmuls(tmp_path) -> None:
    from trinity.utils.cpu import float32_where_bf16_is_slow

    config = SimpleNamespace(
        cluster=SimpleNamespace(gpu_per_node=1),
        model=SimpleNamespace(dtype="bfloat16"),
        explorer=SimpleNamespace(
            rollout_model=SimpleNamespace(dtype="bfloat16"), auxiliary_models=[]
        ),
    )
    assert float32_where_bf16_is_slow(config, native=False) is None
    assert config.model.dtype == "bfloat16"
    config.cluster.gpu_per_node = 0
    assert float32_where_bf16_is_slow(config, native=False) is not None
    assert config.model.dtype == "float32"


# ---------------------------------------------------------------- FSDP offload
@pytest.mark.parametrize(
    ("param", "optimizer", "device", "expected"),
    [
        (True, False, "cuda", True),
        (False, True, "cuda", True),
        (False, False, "cuda", False),
        (True, True, "cpu", False),
    ],
)
def test_fsdp_offload_takes_effect_on_cuda_only(
    param: bool, optimizer: bool, device: str, expected: bool
) -> None:
    fsdp = SimpleNamespace(param_offload=param, optimizer_offload=optimizer)
    assert distributed.offloads(fsdp, torch.device(device)) is expected


def test_collectives_without_a_group_use_the_cpu() -> None:
    assert distributed.collective_device() == torch.device("cpu")


# ---------------------------------------------------------------- checkpoints
def test_checkpoint_tensors_are_moved_to_the_cpu(monkeypatch) -> None:
    moved = []

    def to_cpu(self: torch.Tensor) -> torch.Tensor:
        moved.append(tuple(self.shape))
        return torch.zeros(self.shape)

    monkeypatch.setattr(torch.Tensor, "cpu", to_cpu)
    on_cpu = torch.ones(2)
    state = {
        "weight": torch.empty(3, device="meta"),
        "kept": on_cpu,
        "state": {0: {"exp_avg": torch.empty(4, device="meta"), "step": 5}},
        "groups": [{"params": [0], "betas": (0.9, 0.99)}],
    }
    out = ckpt.on_cpu(state)
    assert sorted(moved) == [(3,), (4,)]
    assert out["weight"].device.type == "cpu"
    assert out["state"][0]["exp_avg"].device.type == "cpu"
    assert out["kept"] is on_cpu  # a CPU tensor is saved as it is
    assert out["state"][0]["step"] == 5
    assert out["groups"] == [{"params": [0], "betas": (0.9, 0.99)}]


def test_rank_shards_load_on_the_cpu_without_a_map_location(tmp_path) -> None:
    (tmp_path / "actor").mkdir()
    ckpt.write_rank_shards(tmp_path, 1, 0, {"w": torch.arange(3.0)}, {"state": {}}, None)
    loaded = torch.load(tmp_path / "actor" / ckpt.shard_name("model", 1, 0), weights_only=True)
    assert loaded["w"].device.type == "cpu"
    assert torch.equal(loaded["w"], torch.arange(3.0))


# ---------------------------------------------------------------- KV cache bound
def _entry(prompt: int, n: int, max_tokens: int) -> DecodeEntry:
    params = SamplingParams(n=n, max_tokens=max_tokens)
    return DecodeEntry([1] * prompt, params, torch.Generator(), 0)


def test_the_kv_budget_is_a_fraction_of_the_device_less_what_is_held() -> None:
    assert kv_cache_budget(0.5, 1000, 100) == 400
    assert kv_cache_budget(0.1, 1000, 500) == 0


def test_kv_bytes_per_token_counts_keys_and_values_of_every_layer() -> None:
    config = SimpleNamespace(
        num_attention_heads=4, num_key_value_heads=2, hidden_size=64, num_hidden_layers=3
    )
    # 2 (k, v) x 3 layers x 2 kv heads x 16 dims x 2 bytes
    assert kv_bytes_per_token(config, torch.bfloat16) == 2 * 3 * 2 * 16 * 2


def test_decode_batches_split_where_their_kv_cache_would_pass_the_budget() -> None:
    entries = [_entry(prompt=6, n=2, max_tokens=4) for _ in range(4)]  # 10 columns a row
    # no budget (the CPU): only max_batch_size splits
    assert [len(c) for c in row_chunks(entries, 64, 100, 1, None)] == [4]
    assert [len(c) for c in row_chunks(entries, 4, 100, 1, None)] == [2, 2]
    # 2 rows x 10 columns x 1 byte = 20 bytes per entry: 45 bytes hold two entries
    assert [len(c) for c in row_chunks(entries, 64, 100, 1, 45)] == [2, 2]
    # an entry that alone exceeds the budget decodes alone, never split
    assert [len(c) for c in row_chunks(entries, 64, 100, 1, 5)] == [1, 1, 1, 1]


def test_the_widest_row_sizes_a_decode_batch_cache() -> None:
    short, long = _entry(prompt=2, n=1, max_tokens=2), _entry(prompt=10, n=1, max_tokens=10)
    # short: 4 columns; long: 20, so together 2 rows x 20 columns = 40 bytes
    assert [len(c) for c in row_chunks([short, long], 64, 100, 1, 40)] == [2]
    assert [len(c) for c in row_chunks([short, long], 64, 100, 1, 39)] == [1, 1]
    # max_tokens past max_model_len is cut to the room left
    assert [len(c) for c in row_chunks([long, long], 64, 12, 1, 24)] == [2]
