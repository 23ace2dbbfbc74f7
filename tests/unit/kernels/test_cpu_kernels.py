"""The fused CPU kernels (trinity/kernels) against the PyTorch ops they replace: the
decode kernels round as the bf16 ops do, AdamW equals torch.optim.AdamW, and a machine
without a compiler keeps the PyTorch path."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from trinity import kernels
from trinity.trainer.precision import MasterWeights

K = kernels.load()
pytestmark = pytest.mark.skipif(K is None, reason="no C compiler: the kernels are not built")


def bf16(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16)


@pytest.mark.parametrize("rows, dim", [(1, 64), (3, 40), (16, 576)])
def test_add_rms_norm_equals_the_bf16_ops(rows: int, dim: int) -> None:
    x, delta, weight = bf16(rows, dim, seed=1), bf16(rows, dim, seed=2), bf16(dim, seed=3)
    out = torch.empty_like(x)
    summed = x.clone()
    K.add_rms_norm(summed, delta, weight, out, 1e-5)
    assert torch.equal(summed, x + delta)  # the residual, updated in place
    torch.testing.assert_close(out, F.rms_norm(x + delta, (dim,), weight, 1e-5), atol=0, rtol=0)
    K.add_rms_norm(x, None, weight, out, 1e-6)  # no residual: a plain norm
    torch.testing.assert_close(out, F.rms_norm(x, (dim,), weight, 1e-6), atol=0, rtol=0)


def test_silu_mul_equals_the_bf16_ops() -> None:
    gate_up = bf16(5, 2 * 300, seed=4, scale=4.0)  # silu over [-16, 16]
    gate_up[0, :6] = torch.tensor([-100.0, -90.0, 0.0, 90.0, 100.0, 1e-3])  # the clamps
    out = torch.empty(5, 300, dtype=torch.bfloat16)
    K.silu_mul(gate_up, out)
    want = F.silu(gate_up[:, :300]) * gate_up[:, 300:]
    # the exp differs from PyTorch's in the last float bits: a bf16 rounding can flip
    differs = out != want
    assert int(differs.sum()) <= 3
    torch.testing.assert_close(out, want, atol=1e-30, rtol=2**-7)


def test_rope_kv_rotates_and_writes_the_cache_column() -> None:
    rows, heads, kv_heads, dim, length = 3, 4, 2, 16, 9
    qkv = bf16(rows, (heads + 2 * kv_heads) * dim, seed=5)
    positions = torch.tensor([0, 7, 3])
    angles = torch.arange(10)[:, None] * torch.rand(
        dim // 2, generator=torch.Generator().manual_seed(6)
    )
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(torch.bfloat16)
    sin = torch.cat([-angles.sin(), angles.sin()], -1).to(torch.bfloat16)  # first half negated
    # a cache of 5 rows of which rows 1..3 are used (as after dropping finished rows)
    keys = torch.zeros(5, kv_heads, length, dim, dtype=torch.bfloat16)[1:4]
    values = torch.zeros_like(keys)
    q = torch.empty(rows, heads, dim, dtype=torch.bfloat16)
    K.rope_kv(qkv, positions, cos, sin, q, keys, values, column=6)

    qk = qkv[:, : (heads + kv_heads) * dim].view(rows, heads + kv_heads, dim)
    c, s = cos[positions][:, None], sin[positions][:, None]
    rotated = qk * c + qk.roll(dim // 2, -1) * s  # the decoder's PyTorch formula
    assert torch.equal(q, rotated[:, :heads])
    assert torch.equal(keys[:, :, 6], rotated[:, heads:])
    assert torch.equal(
        values[:, :, 6], qkv[:, (heads + kv_heads) * dim :].view(rows, kv_heads, dim)
    )
    others = torch.ones(length, dtype=torch.bool)
    others[6] = False
    assert not keys[:, :, others].any() and not values[:, :, others].any()


@pytest.mark.parametrize("grad_dtype", [torch.bfloat16, torch.float32])
def test_adamw_step_equals_torch_adamw(grad_dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(7)
    start = torch.randn(70_001, generator=gen)  # above the threaded-loop threshold, odd
    mine, ref = start.clone(), start.clone().requires_grad_()
    exp_avg, exp_avg_sq = torch.zeros_like(mine), torch.zeros_like(mine)
    param = torch.empty(mine.shape, dtype=torch.bfloat16)
    options = {"lr": 1e-2, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1}
    optimizer = torch.optim.AdamW([ref], foreach=False, **options)
    for step in (1, 2, 3):
        grad = torch.randn(mine.shape, generator=gen).to(grad_dtype)
        K.adamw_step(mine, exp_avg, exp_avg_sq, grad, param, step=step, grad_scale=0.5, **options)
        ref.grad = grad.float() * 0.5
        optimizer.step()
    torch.testing.assert_close(mine, ref.detach(), atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(exp_avg_sq, optimizer.state[ref]["exp_avg_sq"], atol=1e-9, rtol=1e-5)
    assert torch.equal(param, mine.to(torch.bfloat16))
    assert float(mine.sub(start).abs().max()) > 1e-2  # it moved


def test_master_weights_step_equals_the_pytorch_path(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    results = []
    for fused in (True, False):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        master = MasterWeights(model)
        assert master.kernels is not None
        if not fused:
            master.kernels = None
        optimizer = torch.optim.AdamW(master.masters, lr=1e-3, weight_decay=0.01, fused=True)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
        gen = torch.Generator().manual_seed(0)
        for step in range(3):
            for p in master.params:
                p.grad = torch.randn(p.shape, generator=gen).to(torch.bfloat16)
            if step == 1:  # an fp32 sum plus a pending bf16 gradient (micro-batches)
                master.accumulate()
                for p in master.params:
                    p.grad = torch.randn(p.shape, generator=gen).to(torch.bfloat16)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no "scheduler before optimizer" warning
                master.step(optimizer, max_norm=1.0 if step == 2 else 0.0)
                scheduler.step()
        results.append((master, optimizer))
    (fast, fast_opt), (slow, slow_opt) = results
    # the clip factor of step 3 is passed to the step, not left on the optimizer
    assert not hasattr(fast_opt, "grad_scale") and not hasattr(slow_opt, "grad_scale")
    for a, b in zip(fast.masters, slow.masters, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    for p, m in zip(fast.params, fast.masters, strict=True):
        assert torch.equal(p.detach(), m.detach().to(torch.bfloat16))
    # the optimizer state is torch's AdamW state: a checkpoint loads into either path
    fast_state, slow_state = fast_opt.state_dict(), slow_opt.state_dict()
    assert fast_state["state"].keys() == slow_state["state"].keys()
    for key, state in fast_state["state"].items():
        assert state.keys() == slow_state["state"][key].keys()
        assert float(state["step"]) == float(slow_state["state"][key]["step"]) == 3.0
        torch.testing.assert_close(state["exp_avg"], slow_state["state"][key]["exp_avg"])


def test_without_a_compiler_the_kernels_are_off(tmp_path: Path) -> None:
    code = (
        "import logging; logging.basicConfig();"
        "from trinity import kernels; print('LOADED', kernels.load() is not None)"
    )
    env = {
        "PATH": "/nonexistent",
        "CC": str(tmp_path / "no-such-cc"),
        "TRINITY_KERNEL_CACHE": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
    }
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "LOADED False" in done.stdout, done.stderr
    assert "fused CPU kernels unavailable" in done.stderr and "no-such-cc" in done.stderr
    off = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "TRINITY_CPU_KERNELS": "0"},
        capture_output=True,
        text=True,
    )
    assert "LOADED False" in off.stdout and "unavailable" not in off.stderr


def test_a_build_is_cached_by_source_and_cpu(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRINITY_KERNEL_CACHE", str(tmp_path))
    first = kernels.build()
    assert first.parent == tmp_path and first.suffix == ".so"
    mtime = first.stat().st_mtime_ns
    assert kernels.build() == first and first.stat().st_mtime_ns == mtime  # not rebuilt
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no partial files left


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_and_entropy_equal_the_chunked_pytorch_path(temperature: float) -> None:
    from trinity.algorithm.utils import logprobs_and_entropy, logprobs_from_logits

    # (B, T + 1, V) sliced to T positions, as the trainer's logits are: not contiguous
    full = bf16(3, 6, 1000, seed=8, scale=3.0)
    full[0, 0, 5] = 40.0  # one confident position
    labels = torch.randint(0, 1000, (3, 5), generator=torch.Generator().manual_seed(9))
    labels[0, 0] = 5
    weights = torch.randn(3, 5, generator=torch.Generator().manual_seed(10))
    results = []
    for chunk_size in (None, 2):  # None: the kernel; a chunk size: the PyTorch path
        logits = full.clone().requires_grad_()
        logprobs, entropy = logprobs_and_entropy(
            logits[:, :-1], labels, temperature=temperature, chunk_size=chunk_size
        )
        (logprobs * weights).sum().backward()
        only = logprobs_from_logits(logits[:, :-1], labels, temperature, chunk_size=chunk_size)
        results.append((logprobs.detach(), entropy, logits.grad, only.detach()))
    (lp, ent, grad, only), (lp_ref, ent_ref, grad_ref, only_ref) = results
    torch.testing.assert_close(lp, lp_ref, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(only, only_ref, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ent_ref, atol=2e-5, rtol=1e-5)
    assert float(lp[0, 0]) > -1e-3 and float(ent[0, 0]) < 1e-2  # the confident position
    # bf16 gradients: equal up to a rounding of either
    torch.testing.assert_close(grad.float(), grad_ref.float(), atol=1e-8, rtol=2**-7)
    assert not grad[:, -1].any()  # the position no label reads


@pytest.mark.parametrize("rows, dim", [(1, 64), (5, 96), (300, 576)])
def test_rms_norm_forward_is_the_llama_norm_and_its_backward_autograds(rows: int, dim: int) -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(dim, eps=1e-5).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(bf16(dim, seed=4).abs() + 0.5)
    x, grad = bf16(rows, dim, seed=5, scale=3.0), bf16(rows, dim, seed=6)
    y, rstd = K.rms_norm_forward(x, norm.weight.detach(), 1e-5)
    assert torch.equal(y, norm(x))  # bit for bit, both roundings included
    torch.testing.assert_close(rstd, x.float().pow(2).mean(-1).add(1e-5).rsqrt())
    # backward: against float32 autograd of the same function
    x32 = x.float().requires_grad_()
    w32 = norm.weight.detach().float().requires_grad_()
    (w32 * x32 * x32.pow(2).mean(-1, keepdim=True).add(1e-5).rsqrt()).backward(grad.float())
    grad_x, grad_w = K.rms_norm_backward(grad, x, norm.weight.detach(), rstd)
    assert grad_x.dtype == torch.bfloat16 and grad_w.dtype == torch.float32
    for ours, true in ((grad_x.float(), x32.grad), (grad_w, w32.grad)):
        assert (ours - true).norm() / true.norm() < 1e-2


def test_swiglu_kernels_equal_silu_times_up_and_its_autograd() -> None:
    gate, up, grad = bf16(7, 300, seed=7, scale=4.0), bf16(7, 300, seed=8), bf16(7, 300, seed=9)
    out = K.swiglu_forward(gate, up)
    expected = F.silu(gate) * up
    # exp to ~2 ulp of float32: at most a rare last-bit difference after rounding to bf16
    assert (out != expected).float().mean() < 0.01
    torch.testing.assert_close(out, expected, atol=1e-2, rtol=1e-2)
    g32, u32 = gate.float().requires_grad_(), up.float().requires_grad_()
    (F.silu(g32) * u32).backward(grad.float())
    grad_gate, grad_up = K.swiglu_backward(grad, gate, up)
    for ours, true in ((grad_gate, g32.grad), (grad_up, u32.grad)):
        assert ours.dtype == torch.bfloat16
        assert (ours.float() - true).norm() / true.norm() < 1e-2


@pytest.mark.parametrize("batch, cos_batch", [(1, 1), (3, 3), (3, 1)])
def test_rope_is_apply_rotary_pos_emb_bit_for_bit_both_ways(batch: int, cos_batch: int) -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    original = getattr(apply_rotary_pos_emb, "fused_original", apply_rotary_pos_emb)
    steps, heads, dim = 19, 4, 16
    # q as the attention layer makes it: a (B, H, T, D) view of the (B, T, H * D) projection
    projection = bf16(batch, steps, heads * dim, seed=10, scale=3.0).requires_grad_()
    q = projection.view(batch, steps, heads, dim).transpose(1, 2)
    cos, sin = bf16(cos_batch, steps, dim, seed=11), bf16(cos_batch, steps, dim, seed=12)
    expected, _ = original(q, q, cos, sin)
    out = K.rope(q.detach(), cos, sin)
    assert torch.equal(out, expected) and out.stride() == q.stride()
    # backward from a contiguous (B, H, T, D) gradient, as attention's backward gives it,
    # into the projection's layout
    grad = bf16(batch, heads, steps, dim, seed=13)
    (expected_grad,) = torch.autograd.grad(expected, projection, grad)
    ours = K.rope(grad, cos, sin, backward=True, like=(q.shape, q.stride()))
    assert ours.stride() == q.stride()
    assert torch.equal(ours.transpose(1, 2).reshape(projection.shape), expected_grad)
    with pytest.raises(ValueError, match="cos/sin must be"):
        K.rope(q.detach(), cos[:, :-1], sin[:, :-1])


@pytest.mark.parametrize("n", [1, 4095, 70_001, 1 << 20])
def test_sum_squares_is_the_float64_sum(n: int) -> None:
    x = bf16(n, seed=14, scale=5.0)
    for t in (x, x.float()):
        expected = float(x.double().pow(2).sum())
        assert K.sum_squares(t) == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="bf16 or float32"):
        K.sum_squares(x.double())


@pytest.mark.skipif(K is None or not K.amx, reason="no AMX tiles on this CPU")
@pytest.mark.parametrize("rows", [1, 7, 16, 17, 32, 45])
@pytest.mark.parametrize("out_features, in_features", [(48, 64), (960, 576), (576, 1536)])
def test_amx_linear_equals_the_bf16_matmul(rows: int, out_features: int, in_features: int) -> None:
    x = bf16(rows, in_features, seed=10)
    weight = bf16(out_features, in_features, seed=11)
    packed = K.amx_pack(weight)
    assert packed.shape == (out_features // 16, in_features // 32, 16, 16, 2)
    assert packed[1, 0, 3, 5].tolist() == weight[16 + 5, 6:8].tolist()
    out, wide = K.amx_linear(x, packed), K.amx_linear(x, packed, out_f32=True)
    expected = F.linear(x, weight)
    assert torch.equal(wide, out.float())
    if rows <= 32:  # one row block: float32 sums rounded once, as oneDNN's
        assert torch.equal(out, expected)
    else:  # oneDNN blocks larger products differently: sums differ in their last bits
        scale = float(expected.abs().max())
        torch.testing.assert_close(out, expected, atol=1e-3 * scale, rtol=2**-7)


def test_amx_pack_names_the_shapes_it_needs() -> None:
    assert K is not None
    with pytest.raises(ValueError, match=r"16 a, 32 b"):
        K.amx_pack(bf16(40, 64))


@pytest.mark.parametrize(
    "heads, kv_heads, dim, steps",
    [(9, 3, 64, 90), (9, 3, 64, 5), (4, 4, 64, 33), (4, 2, 16, 40), (6, 1, 32, 17)],
)
def test_decode_attention_is_sdpa_within_its_rounding(
    heads: int, kv_heads: int, dim: int, steps: int
) -> None:
    rows, capacity = 7, 96
    # a cache of 9 rows of which rows 1..7 are used, longer than the attended columns
    keys = bf16(9, kv_heads, capacity, dim, seed=7, scale=2.0)[1:8]
    values = bf16(9, kv_heads, capacity, dim, seed=8)[1:8]
    q = bf16(rows, heads, dim, seed=9, scale=2.0)
    mask = torch.zeros(rows, capacity, dtype=torch.bfloat16)
    mask[::3, : min(4, steps - 1)] = float("-inf")  # left padding of some rows
    got = K.decode_attention(q, keys, values, steps, mask)

    def sdpa(dtype: torch.dtype) -> torch.Tensor:
        k, v = keys[:, :, :steps].to(dtype), values[:, :, :steps].to(dtype)
        allowed = mask[:, None, None, :steps].to(dtype)
        out = F.scaled_dot_product_attention(
            q[:, :, None].to(dtype), k, v, attn_mask=allowed, enable_gqa=True
        )
        return out.reshape(rows, heads * dim)

    exact, torch_bf16 = sdpa(torch.float64), sdpa(torch.bfloat16)
    # no further from the float64 result than PyTorch's own bf16 attention
    error, torch_error = (got.double() - exact).abs(), (torch_bf16.double() - exact).abs()
    assert error.mean() <= 1.1 * torch_error.mean()
    assert error.max() <= 1.5 * torch_error.max()
    torch.testing.assert_close(got, torch_bf16, atol=2e-2, rtol=2e-2)
    # padding columns carry no weight: garbage there changes nothing
    keys[::3, :, :4] = 1e4
    assert torch.equal(K.decode_attention(q, keys, values, steps, mask), got)
    # the rows without padding, with no mask at all
    no_mask = K.decode_attention(q[1::3].contiguous(), keys[1::3], values[1::3], steps)
    assert torch.equal(no_mask, got[1::3])


@pytest.mark.parametrize("dim", [64, 16])
def test_decode_attention_over_a_shared_prompt_equals_a_copy_per_row(dim: int) -> None:
    prompts, rows, heads, kv_heads, width, steps = 3, 8, 9, 3, 37, 21
    prompt_keys = bf16(prompts, kv_heads, width, dim, seed=10, scale=2.0)
    prompt_values = bf16(prompts, kv_heads, width, dim, seed=11)
    keys = bf16(rows, kv_heads, 32, dim, seed=12, scale=2.0)  # each row's own columns
    values = bf16(rows, kv_heads, 32, dim, seed=13)
    q = bf16(rows, heads, dim, seed=14, scale=2.0)
    prompt_of = torch.tensor([0, 0, 2, 1, 1, 1, 2, 0])
    mask = torch.zeros(prompts, width, dtype=torch.bfloat16)
    mask[1, :5] = float("-inf")  # prompt 1 is left-padded
    got = K.decode_attention(
        q, keys, values, steps, mask, prefix=(prompt_keys, prompt_values, prompt_of)
    )
    # the same rows with their prompt's columns copied in front of their own
    copied_keys = torch.cat([prompt_keys[prompt_of], keys[:, :, :steps]], dim=2)
    copied_values = torch.cat([prompt_values[prompt_of], values[:, :, :steps]], dim=2)
    row_mask = torch.cat([mask[prompt_of], torch.zeros(rows, steps, dtype=torch.bfloat16)], 1)
    want = K.decode_attention(q, copied_keys, copied_values, width + steps, row_mask)
    assert torch.equal(got, want)
