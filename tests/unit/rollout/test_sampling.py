"""Top-k / top-p filtering and token sampling on hand-made distributions."""

from __future__ import annotations

import math

import pytest
import torch

from trinity.rollout.sampling import filter_logits, sample_tokens

# probabilities 0.5, 0.3, 0.15, 0.05
LOGITS = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()


def kept(top_k: int, top_p: float) -> list[int]:
    out = filter_logits(LOGITS[None], torch.tensor([top_k]), torch.tensor([top_p]))
    return torch.isfinite(out[0]).nonzero().squeeze(-1).tolist()


def test_top_p_keeps_the_smallest_prefix_reaching_the_mass():
    # mass before each token: 0, 0.5, 0.8, 0.95
    assert kept(-1, 0.7) == [0, 1]  # 0.8 >= 0.7 drops token 2
    assert kept(-1, 0.82) == [0, 1, 2]  # 0.8 < 0.82 keeps it
    assert kept(-1, 0.45) == [0]  # 0.5 >= 0.45 drops token 1
    assert kept(-1, 1e-9) == [0]  # the top token always stays
    assert kept(-1, 1.0) == [0, 1, 2, 3]


def test_top_k_then_top_p_on_the_renormalized_rest():
    assert kept(3, 1.0) == [0, 1, 2]
    # top-3 renormalized: 0.5/0.95 = 0.526, 0.3/0.95 = 0.316, 0.158;
    # mass before token 2 = 0.842 >= 0.82, so it goes (without top-k it stayed)
    assert kept(3, 0.82) == [0, 1]
    assert kept(1, 1.0) == [0]
    assert kept(10, 1.0) == [0, 1, 2, 3]  # k beyond the vocabulary keeps everything


def test_rows_filter_independently():
    logits = LOGITS.repeat(3, 1)
    out = filter_logits(logits, torch.tensor([-1, 2, -1]), torch.tensor([1.0, 1.0, 0.7]))
    assert torch.isfinite(out).sum(dim=-1).tolist() == [4, 2, 2]
    torch.testing.assert_close(out[0], LOGITS)  # an unfiltered row is unchanged


def test_unfiltered_row_keeps_a_wide_vocabulary():
    # 100 tokens, more than the first candidate set: the row without top-k / top-p
    # must keep all of them while its neighbour keeps 2
    logits = torch.randn(2, 100, generator=torch.Generator().manual_seed(0))
    out = filter_logits(logits, torch.tensor([-1, 2]), torch.tensor([1.0, 1.0]))
    assert torch.isfinite(out).sum(dim=-1).tolist() == [100, 2]


def test_wide_top_p_set_matches_a_full_sort():
    # slowly decaying over 1000 tokens: the kept set is far wider than the 64 first
    # candidates, so the candidate set has to widen
    logits = -torch.arange(1000, dtype=torch.float32)[None] * 1e-3
    out = filter_logits(logits, torch.tensor([-1]), torch.tensor([0.5]))
    probs = logits.softmax(-1)[0]
    expected = int(((probs.cumsum(0) - probs) < 0.5).sum())
    assert expected > 300
    assert int(torch.isfinite(out).sum()) == expected


def test_sampling_frequencies_follow_the_filtered_distribution():
    rows = 20000
    logits = torch.tensor([0.5, 0.3, 0.2, 0.0]).log().repeat(rows, 1)  # token 3: -inf
    generator = torch.Generator().manual_seed(0)
    tokens, logprobs = sample_tokens(
        logits,
        torch.ones(rows),
        torch.full((rows,), -1),
        torch.ones(rows),
        [(torch.arange(rows), generator)],
    )
    freq = torch.bincount(tokens, minlength=4).float() / rows
    # standard error of a frequency near 0.5 is sqrt(0.25 / 20000) = 0.0035
    torch.testing.assert_close(freq, torch.tensor([0.5, 0.3, 0.2, 0.0]), atol=0.015, rtol=0)
    torch.testing.assert_close(logprobs, logits.gather(1, tokens[:, None]).squeeze(-1))


def test_logprobs_use_the_temperature_and_one_for_greedy():
    # logits [0, ln 3]: at T = 1 the probabilities are 1/4, 3/4;
    # at T = 2 they are 1 : sqrt(3), so token 1 has sqrt(3) / (1 + sqrt(3)) = 0.634
    logits = torch.tensor([[0.0, math.log(3)], [0.0, math.log(3)]])
    generator = torch.Generator().manual_seed(0)
    banned = torch.tensor([[True, False], [False, False]])  # row 0 may only pick token 1
    tokens, logprobs = sample_tokens(
        logits,
        torch.tensor([2.0, 0.0]),
        torch.tensor([-1, -1]),
        torch.tensor([1.0, 1.0]),
        [(torch.arange(2), generator)],
        banned,
    )
    assert tokens.tolist() == [1, 1]
    sqrt3 = math.sqrt(3)
    expected = torch.tensor([math.log(sqrt3 / (1 + sqrt3)), math.log(0.75)])
    torch.testing.assert_close(logprobs, expected)


def test_greedy_row_ignores_its_generator():
    logits = torch.tensor([[0.0, 1.0, 0.5]])
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        tokens, _ = sample_tokens(
            logits,
            torch.tensor([0.0]),
            torch.tensor([-1]),
            torch.tensor([1.0]),
            [(torch.arange(1), generator)],
        )
        assert tokens.tolist() == [1]


U = 2.0**-24  # float32 unit roundoff


def _kernels():
    from trinity import kernels

    lib = kernels.load()
    if lib is None:
        pytest.skip("no C compiler: the kernels are not built")
    return lib


def test_kernel_sampler_draws_the_tensor_samplers_tokens():
    lib = _kernels()
    rows, vocab = 24, 3000  # a vocabulary of whole blocks and a partial last one
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(rows, vocab, generator=gen) * 2
    logits[0, :2900] = float("-inf")  # mass only in the last, partial block
    logits[1, 100:] = float("-inf")  # mass only in the first block
    logits[2, ::2] = float("-inf")  # zero-weight tokens in every block
    temperature = torch.ones(rows)
    temperature[3], temperature[4], temperature[5] = 0.5, 1.7, 0.0  # row 5 greedy
    args = (temperature, torch.full((rows,), -1), torch.ones(rows))
    same = total = 0
    for seed in range(20):
        groups = [(torch.arange(rows), torch.Generator().manual_seed(seed))]
        want, _ = sample_tokens(logits, *args, groups)
        groups = [(torch.arange(rows), torch.Generator().manual_seed(seed))]
        got, got_lp = sample_tokens(logits, *args, groups, kernels=lib)
        assert torch.isfinite(logits.gather(1, got[:, None])).all()  # never a -inf token
        assert got[5] == logits[5].argmax()
        match = got == want
        same, total = same + int(match.sum()), total + rows
        # log_softmax(logits / T) at the token, whichever was drawn: float32 sums in
        # the kernel's order, within the bound of tests/unit/kernels/test_cpu_kernels.py's
        # lse_bounds of float64 for any order (V the vocabulary, M = max |x / T|)
        scaled = logits.double() / torch.where(temperature > 0, temperature, 1.0)[:, None]
        lse = scaled.logsumexp(-1)
        expected = scaled.gather(1, got[:, None]).squeeze(-1) - lse
        size = torch.where(scaled.isfinite(), scaled.abs(), 0).amax(-1)
        bound = U * (vocab + 9 * size + 4 * lse.abs() + expected.abs() + 8)
        assert ((got_lp.double() - expected).abs() <= bound).all()
    # only draws within float rounding of a token boundary may differ
    assert same >= 0.98 * total


def test_kernel_sampler_frequencies_and_fallback_to_the_filters():
    lib = _kernels()
    rows = 20000
    logits = torch.tensor([0.5, 0.3, 0.2, 0.0]).log().repeat(rows, 1)  # token 3: -inf
    ones, no_k = torch.ones(rows), torch.full((rows,), -1)
    generator = torch.Generator().manual_seed(0)
    tokens, _ = sample_tokens(
        logits, ones, no_k, ones, [(torch.arange(rows), generator)], None, lib
    )
    freq = torch.bincount(tokens, minlength=4).float() / rows
    torch.testing.assert_close(freq, torch.tensor([0.5, 0.3, 0.2, 0.0]), atol=0.015, rtol=0)
    # top-k (and top-p, banned tokens) keep the tensor path: still only tokens 0 and 1
    top2 = torch.full((rows,), 2)
    tokens, _ = sample_tokens(
        logits, ones, top2, ones, [(torch.arange(rows), generator)], None, lib
    )
    assert set(tokens.tolist()) == {0, 1}
