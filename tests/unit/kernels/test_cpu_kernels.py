"""The fused CPU kernels (trinity/kernels) against the PyTorch ops they replace and
against float64.

Two kinds of contract, so that they hold on every x86-64 CPU (AVX2, AVX-512, AMX; the
vector width changes the order of a kernel's float32 sums, and so does torch's):

- elementwise arithmetic with a defined rounding (bf16 products and sums, rotary
  embedding, a value rounded to bf16) is compared bit for bit;
- a float32 sum (norms, log-sum-exp, entropy, dot products, softmax sums) is compared
  with float64 within a bound that holds for any summation order: n positive terms
  summed in any order are within (n - 1) u of their exact sum (u = 2^-24, float32's
  unit roundoff; Higham, Accuracy and Stability of Numerical Algorithms, 4.2), and
  a rounding to bf16 moves a value by at most 2^-8 of itself.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from trinity import kernels
from trinity.trainer.precision import MasterWeights

K = kernels.load()
pytestmark = pytest.mark.skipif(K is None, reason="kernels not built (no compiler, or off)")

U = 2.0**-24  # float32 unit roundoff
U_BF16 = 2.0**-8  # bf16 unit roundoff: |bf16(v) - v| <= U_BF16 |v|
# exp_approx and exp_fma (cpu_kernels.c) are within 1.3 float32 ulp of exp over [-87, 88]
# (every float checked against libm's double exp): a relative error of at most 3 u
EXP = 3 * U


def bf16(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16)


def assert_within(got: torch.Tensor, exact: torch.Tensor, bound: torch.Tensor) -> None:
    """|got - exact| <= bound elementwise (float64), with the worst element reported."""
    excess = (got.double() - exact).abs() - bound
    worst = int(excess.argmax())
    assert float(excess.flatten()[worst]) <= 0, (
        f"element {worst}: got {float(got.flatten()[worst])}, float64 "
        f"{float(exact.flatten()[worst])}, bound {float(bound.flatten()[worst])}"
    )


def assert_rounds_between(got: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> None:
    """``got`` (bf16) lies between the bf16 roundings of ``low`` and ``high`` (float64):
    rounding is monotone, so a value computed anywhere in [low, high] rounds there."""
    a, b = low.to(torch.bfloat16).double(), high.to(torch.bfloat16).double()
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    outside = (got.double() < lo) | (got.double() > hi)
    assert not outside.any(), (got[outside][:5], lo[outside][:5], hi[outside][:5])


def rms_norm64(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    return x * x.pow(2).mean(-1, keepdim=True).add(eps).rsqrt() * weight.double()


@pytest.mark.parametrize("rows, dim", [(1, 64), (3, 40), (16, 576), (300, 576)])
def test_add_rms_norm_is_the_float64_norm_within_one_bf16_rounding(rows: int, dim: int) -> None:
    """The residual add is a bf16 add (the float32 sum of two bf16 values, rounded): bit
    for bit. The norm is bf16(x r w), r = 1 / sqrt(mean(x^2) + eps) from a float32 sum of
    squares in an order that depends on the vector width (torch's F.rms_norm sums in its
    own). The squares of bf16 values are exact in float32, so the sum is within
    (dim - 1) u of the exact one in any order; the mean, + eps, sqrt and reciprocal halve
    that and add 3 u, the two products 2 u: x r w is within (dim + 6) u of float64, and
    its rounding to bf16 adds U_BF16."""
    x, delta, weight = bf16(rows, dim, seed=1), bf16(rows, dim, seed=2), bf16(dim, seed=3)
    out = torch.empty_like(x)
    summed = x.clone()
    K.add_rms_norm(summed, delta, weight, out, 1e-5)
    assert torch.equal(summed, x + delta)  # the residual, updated in place
    exact = rms_norm64(x + delta, weight, 1e-5)
    assert_within(out, exact, (U_BF16 + 2 * (dim + 6) * U) * exact.abs())
    K.add_rms_norm(x, None, weight, out, 1e-6)  # no residual: a plain norm
    exact = rms_norm64(x, weight, 1e-6)
    assert_within(out, exact, (U_BF16 + 2 * (dim + 6) * U) * exact.abs())


def assert_silu_times_up(out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> None:
    """``out`` is bf16(s up) with s = bf16(silu(gate)) and silu computed in float32 with
    an exp of relative error EXP: s is within (EXP + 3 u) of silu (1 + e, the division)
    before its rounding, so s lies between the bf16 roundings of silu64 (1 -+ 8 u), and
    the product of two bf16 values is exact in float32, rounded once. Where exp's argument
    is clamped (gate < -88.7) silu is below 1e-36 and so is the kernel's."""
    a = gate.double()
    silu = a / (1 + torch.exp(-a))
    low, high = silu * (1 - 8 * U), silu * (1 + 8 * U)

    def times_up(s: torch.Tensor) -> torch.Tensor:
        return (s.to(torch.bfloat16).float() * up.float()).double()

    tiny = silu.abs() < 1e-36
    assert (out[tiny].float().abs() < 1e-30).all()
    assert_rounds_between(out[~tiny], times_up(low)[~tiny], times_up(high)[~tiny])


def test_silu_mul_is_silu_times_up_rounded_as_the_bf16_ops() -> None:
    gate_up = bf16(5, 2 * 300, seed=4, scale=4.0)  # silu over [-16, 16]
    gate_up[0, :6] = torch.tensor([-100.0, -90.0, 0.0, 90.0, 100.0, 1e-3])  # the clamps
    out = torch.empty(5, 300, dtype=torch.bfloat16)
    K.silu_mul(gate_up, out)
    assert_silu_times_up(out, gate_up[:, :300], gate_up[:, 300:])
    # and PyTorch's bf16 ops: their exp differs in the last float bits, so the rounding
    # of silu can flip by one bf16 ulp (2^-7 relative), plus a rounding of each product
    want = F.silu(gate_up[:, :300]) * gate_up[:, 300:]
    torch.testing.assert_close(out, want, atol=1e-30, rtol=2**-6)


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


def lse_bounds(
    logits: torch.Tensor, inv_temp: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Float64 log-sum-exp, log-probabilities and entropy of each row of ``logits`` times
    ``inv_temp``, and the bound of a float32 log-sum-exp's error in any summation order.

    With V the vocabulary and M = max |x / T| of a row: z = x / T is rounded (u M), so is
    top = max z and d = z - top (|d| <= 2 M): d is within 4 u M, each exp(d) within
    4 u M + EXP relative, and the sum of the V positive exps in any order within
    rho = (V - 1 + 4 M + 3) u of the exact sum S >= 1 (the top term is 1). Then
    log S is off by rho plus logf's 2 u |log S| (|log S| <= |lse| + M), lse = top + log S
    by one more rounding: |lse - lse64| <= u (V + 8 M + 4 |lse| + 8). The entropy
    H = log S + A with A = -sum e d / S in [0, H]: the sum e d is of terms of one sign, so
    A is within A (2 rho + 3 u) + 4 u M, and |H - H64| <= u (V + 8 M + 8) (1 + 2 H)."""
    z = logits.double() * inv_temp
    vocab = z.shape[-1]
    scale = z.abs().amax(-1)
    lse = z.logsumexp(-1)
    logp = z - lse[..., None]
    entropy = -(logp.exp() * logp).sum(-1)
    lse_bound = U * (vocab + 8 * scale + 4 * lse.abs() + 8)
    entropy_bound = U * (vocab + 8 * scale + 8) * (1 + 2 * entropy)
    return lse, logp, entropy, torch.stack([lse_bound, entropy_bound, scale])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprob_rows_are_the_float64_log_softmax_within_a_bound_for_any_sum_order(
    temperature: float,
) -> None:
    """logprob_rows against float64 within :func:`lse_bounds`; its backward, given the
    forward's lse, is -g / T exp(z - lse) (g / T (1 - p) at the label) rounded once to
    bf16: within U_BF16 of float64 plus p |g| / T times the relative error of p (lse's
    bound, 4 u M + EXP for exp's argument and the exp, 4 u for the products)."""
    full = bf16(3, 6, 1000, seed=8, scale=3.0)  # (B, T + 1, V) sliced: strided rows
    full[0, 0, 5] = 40.0  # one confident position
    logits = full[:, :-1]
    labels = torch.randint(0, 1000, (3, 5), generator=torch.Generator().manual_seed(9))
    labels[0, 0] = 5
    logprob, lse, entropy = K.logprob_rows(logits, labels, temperature, entropy=True)
    lse64, logp64, entropy64, (lse_bound, entropy_bound, scale) = lse_bounds(
        logits, 1 / temperature
    )
    label_logp = logp64.gather(-1, labels[..., None]).squeeze(-1)
    assert_within(lse, lse64, lse_bound)
    assert_within(logprob, label_logp, lse_bound + U * (scale + label_logp.abs()))
    assert_within(entropy, entropy64, entropy_bound)
    assert float(logprob[0, 0]) > -1e-3 and float(entropy[0, 0]) < 1e-2  # the confident one

    grad = torch.randn(3, 5, generator=torch.Generator().manual_seed(10))
    got = K.logprob_rows_backward(logits, labels, lse, grad, temperature)
    p = logp64.exp()
    onehot = F.one_hot(labels, 1000).double()
    exact = grad.double()[..., None] / temperature * (onehot - p)
    relative_p = lse_bound + 4 * U * scale + EXP + 4 * U
    slack = (1 + U_BF16) * grad.double().abs()[..., None] / temperature * p
    assert_within(got, exact, (U_BF16 + 4 * U) * exact.abs() + slack * relative_p[..., None])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_and_entropy_take_the_kernel_within_its_bound(temperature: float) -> None:
    """trinity.algorithm.utils with bf16 logits and default chunking runs the kernel
    (the PyTorch path is compared with float64 in tests/unit/algorithm/test_utils.py):
    log-probs, entropy and the logits' gradient within the bounds above."""
    from trinity.algorithm.utils import logprobs_and_entropy, logprobs_from_logits

    full = bf16(3, 6, 1000, seed=8, scale=3.0)
    labels = torch.randint(0, 1000, (3, 5), generator=torch.Generator().manual_seed(9))
    weights = torch.randn(3, 5, generator=torch.Generator().manual_seed(10))
    logits = full.clone().requires_grad_()
    logprobs, entropy = logprobs_and_entropy(logits[:, :-1], labels, temperature=temperature)
    (logprobs * weights).sum().backward()
    only = logprobs_from_logits(logits[:, :-1], labels, temperature)
    assert torch.equal(only, logprobs)  # one kernel, with or without the entropy
    _, logp64, entropy64, (lse_bound, entropy_bound, scale) = lse_bounds(
        full[:, :-1], 1 / temperature
    )
    label_logp = logp64.gather(-1, labels[..., None]).squeeze(-1)
    assert_within(logprobs.detach(), label_logp, lse_bound + U * (scale + label_logp.abs()))
    assert_within(entropy, entropy64, entropy_bound)
    # the gradient: bf16, within a rounding and the float32 window of p
    exact = (
        weights.double()[..., None]
        / temperature
        * (F.one_hot(labels, 1000).double() - logp64.exp())
    )
    relative_p = lse_bound + 4 * U * scale + EXP + 4 * U
    slack = 2 * weights.double().abs()[..., None] / temperature * logp64.exp()
    assert_within(
        logits.grad[:, :-1], exact, 2 * U_BF16 * exact.abs() + slack * relative_p[..., None]
    )
    assert not logits.grad[:, -1].any()  # the position no label reads


@pytest.mark.parametrize("rows, dim", [(1, 64), (5, 96), (300, 576)])
def test_rms_norm_forward_is_the_llama_norm_and_its_backward_autograds(rows: int, dim: int) -> None:
    """y = w bf16(x rstd), Llama's norm, computed from rstd: bit for bit given the kernel's
    own rstd (elementwise, rounded as the bf16 ops round). rstd comes from a float32 sum of
    squares whose order depends on the vector width (torch's LlamaRMSNorm sums in its
    own): within (dim + 6) u of float64 in any order (exact squares, dim - 1 roundings of
    the sum halved by the sqrt, 4 more roundings). Where the two rstd agree, the rows are
    LlamaRMSNorm's bit for bit."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(dim, eps=1e-5).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(bf16(dim, seed=4).abs() + 0.5)
    weight = norm.weight.detach()
    x, grad = bf16(rows, dim, seed=5, scale=3.0), bf16(rows, dim, seed=6)
    y, rstd = K.rms_norm_forward(x, weight, 1e-5)
    exact_rstd = x.double().pow(2).mean(-1).add(1e-5).rsqrt()
    assert_within(rstd, exact_rstd, (dim + 6) * U * exact_rstd)
    normed = (x.float() * rstd[:, None]).to(torch.bfloat16)
    assert torch.equal(y, (weight.float() * normed.float()).to(torch.bfloat16))
    with torch.no_grad():
        theirs = norm(x)
    torch_rstd = x.float().pow(2).mean(-1).add(1e-5).rsqrt()
    same = rstd == torch_rstd
    assert torch.equal(y[same], theirs[same])
    # backward: against float32 autograd of the same function
    x32 = x.float().requires_grad_()
    w32 = weight.float().requires_grad_()
    (w32 * x32 * x32.pow(2).mean(-1, keepdim=True).add(1e-5).rsqrt()).backward(grad.float())
    grad_x, grad_w = K.rms_norm_backward(grad, x, weight, rstd)
    assert grad_x.dtype == torch.bfloat16 and grad_w.dtype == torch.float32
    for ours, true in ((grad_x.float(), x32.grad), (grad_w, w32.grad)):
        assert (ours - true).norm() / true.norm() < 1e-2


def test_swiglu_kernels_equal_silu_times_up_and_its_autograd() -> None:
    gate, up, grad = bf16(7, 300, seed=7, scale=4.0), bf16(7, 300, seed=8), bf16(7, 300, seed=9)
    out = K.swiglu_forward(gate, up)
    assert_silu_times_up(out, gate, up)  # exp_fma is within EXP too
    torch.testing.assert_close(out, F.silu(gate) * up, atol=1e-30, rtol=2**-6)
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
    """Squares of bf16 values are exact in float32; each block of at most 4096 is summed
    in float32 in an order that depends on the vector width (within 4095 u of its exact
    sum, all terms positive), the blocks in double (negligible)."""
    x = bf16(n, seed=14, scale=5.0)
    for t in (x, x.float()):
        expected = float(x.double().pow(2).sum())
        assert K.sum_squares(t) == pytest.approx(expected, rel=(min(n, 4096) + 1) * U)
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
    assert torch.equal(wide, out.float())  # the same sums, rounded to bf16, widened
    # exact bf16 products summed in float32 in the tiles' order (oneDNN sums in its own):
    # within (K + 1) u of the sum of |products| in any order, then rounded to bf16
    exact = x.double() @ weight.double().T
    magnitude = x.double().abs() @ weight.double().abs().T
    assert_within(out, exact, U_BF16 * exact.abs() + 2 * (in_features + 1) * U * magnitude)


def test_amx_pack_names_the_shapes_it_needs() -> None:
    assert K is not None
    with pytest.raises(ValueError, match=r"16 a, 32 b"):
        K.amx_pack(bf16(40, 64))


def attention_bound(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 attention of q (rows, heads, dim) over keys / values (rows, kv_heads, C,
    dim) with the additive mask (rows, C), and the bound of the kernel's error for any
    order of its float32 sums: (rows, heads * dim) each.

    The score of column t, s = scale q.k + mask, is a float32 sum of dim exact products:
    within D = scale (dim + 1) u sum |q k| + u |s| of float64 in any order. Each exp(s -
    max) is then within eta = 2 D + 4 u S + EXP relative (S = max |s|), rounded to bf16
    where it weights the values (U_BF16), and the C weighted values and the softmax's sum
    are float32 sums (C u each). With A = sum_t p_t |v_t| (the attention of |v|) the
    output is within (U_BF16 + 2 eta + 2 (C + 1) u) A of float64, and its rounding to bf16
    adds U_BF16 of itself."""
    rows, heads, dim = q.shape
    kv_heads, columns = keys.shape[1], keys.shape[2]
    group = heads // kv_heads
    k = keys.double().repeat_interleave(group, 1)  # (rows, heads, C, dim)
    v = values.double().repeat_interleave(group, 1)
    scale = dim**-0.5
    scores = scale * torch.einsum("rhd,rhcd->rhc", q.double(), k) + mask.double()[:, None]
    p = scores.softmax(-1)
    exact = torch.einsum("rhc,rhcd->rhd", p, v)
    spread = torch.einsum("rhc,rhcd->rhd", p, v.abs())
    magnitude = scale * torch.einsum("rhd,rhcd->rhc", q.double().abs(), k.abs())
    finite = scores.isfinite()
    size = torch.where(finite, scores.abs(), 0).amax(-1)
    drift = torch.where(finite, scale * (dim + 1) * U * magnitude, 0).amax(-1) + U * size
    eta = 2 * drift + 4 * U * size + EXP
    slack = U_BF16 + 2 * eta[..., None] + 2 * (columns + 1) * U
    bound = U_BF16 * exact.abs() + (1 + U_BF16) * slack * spread
    return exact.reshape(rows, -1), bound.reshape(rows, -1)


@pytest.mark.parametrize(
    "heads, kv_heads, dim, steps",
    [(9, 3, 64, 90), (9, 3, 64, 5), (4, 4, 64, 33), (4, 2, 16, 40), (6, 1, 32, 17)],
)
def test_decode_attention_is_sdpa_within_its_rounding(
    heads: int, kv_heads: int, dim: int, steps: int
) -> None:
    """Against float64 within :func:`attention_bound`; head size 64 takes the AVX-512 path
    on CPUs with AVX512-BF16, the others (and every CPU without) the plain loops."""
    rows, capacity = 7, 96
    # a cache of 9 rows of which rows 1..7 are used, longer than the attended columns
    keys = bf16(9, kv_heads, capacity, dim, seed=7, scale=2.0)[1:8]
    values = bf16(9, kv_heads, capacity, dim, seed=8)[1:8]
    q = bf16(rows, heads, dim, seed=9, scale=2.0)
    mask = torch.zeros(rows, capacity, dtype=torch.bfloat16)
    mask[::3, : min(4, steps - 1)] = float("-inf")  # left padding of some rows
    got = K.decode_attention(q, keys, values, steps, mask)
    exact, bound = attention_bound(q, keys[:, :, :steps], values[:, :, :steps], mask[:, :steps])
    assert_within(got, exact, bound)
    # the same arithmetic, so the same bits: padding columns carry no weight (garbage
    # there changes nothing), and a row's result does not depend on the other rows
    keys[::3, :, :4] = 1e4
    assert torch.equal(K.decode_attention(q, keys, values, steps, mask), got)
    no_mask = K.decode_attention(q[1::3].contiguous(), keys[1::3], values[1::3], steps)
    assert torch.equal(no_mask, got[1::3])  # the rows without padding, with no mask at all


@pytest.mark.parametrize("dim", [64, 16])
def test_decode_attention_over_a_shared_prompt_equals_a_copy_per_row(dim: int) -> None:
    """Bit for bit: each column's score is summed alike wherever its segment's blocks of
    16 columns begin (the AVX-512 path sums a segment's last columns as a block), and the
    softmax and the values run over the same columns in the same order."""
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
