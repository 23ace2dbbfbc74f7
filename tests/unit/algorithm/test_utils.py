"""Masked statistics and the chunked logits functions."""

import math

import pytest
import torch

from trinity.algorithm import (
    entropy_from_logits,
    logprobs_from_logits,
    masked_mean,
    masked_var,
    masked_whiten,
)
from trinity.algorithm.utils import _rows_per_chunk, clamped_log_ratio, logprobs_and_entropy


def test_masked_statistics():
    values = torch.tensor([[1.0, 2.0, float("nan")], [3.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # mean of 1, 2, 3 = 2; sample variance ((-1)^2 + 0 + 1^2) / 2 = 1
    assert masked_mean(values, mask).item() == 2.0
    assert masked_mean(values, mask, dim=-1).tolist() == [1.5, 3.0]
    assert masked_var(values, mask).item() == 1.0
    assert masked_whiten(values, mask).tolist() == [
        pytest.approx([-1.0, 0.0, 0.0]),
        pytest.approx([1.0, 0.0, 0.0]),
    ]


def test_by_hand_two_token_vocabulary():
    # softmax([0, ln 3]) = [1/4, 3/4]
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    assert logprobs_from_logits(logits, torch.tensor([[1]])).item() == pytest.approx(math.log(0.75))
    # -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.562335
    assert entropy_from_logits(logits).item() == pytest.approx(0.562335, abs=1e-6)
    # temperature 2 halves the logits: softmax([0, ln 3 / 2]) = [1, sqrt 3] / (1 + sqrt 3)
    expected = math.log(math.sqrt(3) / (1 + math.sqrt(3)))
    assert logprobs_from_logits(logits, torch.tensor([[1]]), temperature=2.0).item() == (
        pytest.approx(expected)
    )


def naive(logits, labels, temperature):
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    logprobs = log_probs.gather(-1, labels[..., None]).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return logprobs, entropy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_size", [1, 3, None])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_equals_naive_values_and_gradients(dtype, chunk_size, temperature):
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(2, 5, 11, generator=gen)).to(dtype)
    labels = torch.randint(0, 11, (2, 5), generator=gen)
    weights = torch.randn(2, 5, generator=gen)

    ours = logits.clone().requires_grad_(True)
    lp = logprobs_from_logits(ours, labels, temperature, chunk_size)
    ent = entropy_from_logits(ours, chunk_size, temperature)
    ((lp + ent) * weights).sum().backward()

    ref = logits.clone().requires_grad_(True)
    lp_ref, ent_ref = naive(ref, labels, temperature)
    ((lp_ref + ent_ref) * weights).sum().backward()

    assert lp.dtype == torch.float32 and lp.shape == (2, 5)
    torch.testing.assert_close(lp, lp_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ent_ref, atol=1e-5, rtol=1e-5)
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # the naive gradient is rounded to bf16
    torch.testing.assert_close(ours.grad.float(), ref.grad.float(), atol=tol, rtol=tol)


def test_default_chunks_fit_in_cache_and_equal_one_chunk():
    # a real vocabulary: the default chunking of the PyTorch path splits 80 positions into
    # cache-sized chunks, and every position's numbers are those of the whole batch in
    # one chunk, bit for bit (bf16 logits take the fused kernel unless a size is given)
    vocab = 49152
    rows = _rows_per_chunk(vocab, None)
    assert 1 <= rows < 40 and rows * vocab * 4 <= 2 * 1024 * 1024
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(2, 40, vocab, generator=gen)).bfloat16()
    labels = torch.randint(0, vocab, (2, 40), generator=gen)
    weights = torch.randn(2, 40, generator=gen)
    results = []
    for chunk_size in (rows, 80):
        ours = logits.clone().requires_grad_(True)
        lp, ent = logprobs_and_entropy(ours, labels, 0.7, chunk_size)
        (grad,) = torch.autograd.grad((lp * weights).sum(), ours)
        entropy = entropy_from_logits(ours, chunk_size, 0.7)
        (entropy_grad,) = torch.autograd.grad((entropy * weights).sum(), ours)
        results.append((lp, ent, grad, entropy, entropy_grad))
    for chunked, whole in zip(*results, strict=True):
        torch.testing.assert_close(chunked, whole, atol=0, rtol=0)


def test_bf16_logits_take_the_pytorch_path_without_the_kernels(monkeypatch):
    """The plain path (kernels.load() returning None) for the logits the kernel would
    take (bf16, default chunking): PyTorch's chunked log-softmax, as the naive one."""
    from trinity import kernels
    from trinity.algorithm import utils

    monkeypatch.setattr(kernels, "load", lambda: None)
    monkeypatch.setattr(utils._KernelLogprobs, "apply", lambda *a: pytest.fail("kernel ran"))
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(2, 5, 11, generator=gen)).bfloat16()
    labels = torch.randint(0, 11, (2, 5), generator=gen)
    weights = torch.randn(2, 5, generator=gen)
    ours = logits.clone().requires_grad_(True)
    lp, ent = logprobs_and_entropy(ours, labels, 0.7)
    (lp * weights).sum().backward()
    ref = logits.clone().requires_grad_(True)
    lp_ref, ent_ref = naive(ref, labels, 0.7)
    (lp_ref * weights).sum().backward()
    torch.testing.assert_close(lp, lp_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ent_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.grad.float(), ref.grad.float(), atol=1e-2, rtol=1e-2)


def test_backward_does_not_modify_the_logits():
    logits = torch.randn(1, 4, 7, requires_grad=True)
    before = logits.detach().clone()
    labels = torch.zeros(1, 4, dtype=torch.long)
    (logprobs_from_logits(logits, labels).sum() + entropy_from_logits(logits).sum()).backward()
    assert torch.equal(logits.detach(), before)


def test_shape_mismatch_is_reported():
    with pytest.raises(ValueError, match="do not match"):
        logprobs_from_logits(torch.randn(1, 4, 7), torch.zeros(1, 3, dtype=torch.long))


def test_clamped_log_ratio_bounds_the_log_ratio_before_exp():
    # log ratios 30, -0.5, -25 -> clamped to 20, -0.5, -20; ratios e^20, e^-0.5, e^-20
    logprobs = torch.tensor([[0.0, -1.0, -30.0]], dtype=torch.float64)
    old = torch.tensor([[-30.0, -0.5, -5.0]], dtype=torch.float64)
    log_ratio, ratio = clamped_log_ratio(logprobs, old)
    torch.testing.assert_close(log_ratio, torch.tensor([[20.0, -0.5, -20.0]], dtype=torch.float64))
    torch.testing.assert_close(ratio, torch.exp(log_ratio))
