"""The sampler's two-level inverse-CDF search: the same token as a search over the full
cumulative sum, never a zero-weight token, frequencies that follow the weights."""

from __future__ import annotations

import torch

from trinity.rollout.sampling import _BLOCK, _inverse_cdf

VOCAB = 2 * _BLOCK + 88  # two full blocks and a partial one


def weights_with_holes(rows: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    weights = torch.rand(rows, VOCAB, generator=generator) ** 4
    weights[:, _BLOCK : 2 * _BLOCK] = 0  # a whole block of impossible tokens
    weights[:, : _BLOCK // 2] = 0  # the start of the first block
    weights[:, -1] = 0  # the last token of the partial block
    return weights


def full_search(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    cdf = weights.double().cumsum(-1)
    return torch.searchsorted(cdf, (u.double() * cdf[:, -1])[:, None], right=True).squeeze(-1)


def test_equals_a_search_over_the_full_cumulative_sum():
    weights = weights_with_holes(4000)
    u = torch.rand(4000, generator=torch.Generator().manual_seed(1))
    picked = _inverse_cdf(weights, u)
    expected = full_search(weights, u)
    # float32 sums in another order may move a pick by one token at a boundary
    assert (picked != expected).float().mean() < 1e-3
    assert bool((weights.gather(1, picked[:, None]) > 0).all())


def test_extreme_uniforms_pick_only_possible_tokens():
    weights = weights_with_holes(3)
    u = torch.tensor([0.0, 1 - 2**-24, 0.5])
    picked = _inverse_cdf(weights, u)
    first, last = _BLOCK // 2, VOCAB - 2  # first and last tokens of non-zero weight
    assert picked[0] == first and picked[1] == last
    assert bool((weights.gather(1, picked[:, None]) > 0).all())


def test_frequencies_follow_the_weights():
    # one row repeated: token frequencies over 40000 draws against the probabilities
    rows = 40000
    weights = torch.zeros(rows, VOCAB)
    weights[:, [3, _BLOCK - 1, _BLOCK, VOCAB - 1]] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    u = torch.rand(rows, generator=torch.Generator().manual_seed(2))
    counts = torch.bincount(_inverse_cdf(weights, u), minlength=VOCAB).float()
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    frequencies = counts[[3, _BLOCK - 1, _BLOCK, VOCAB - 1]] / rows
    assert counts.sum() == rows  # nothing else was picked
    # 4 standard deviations of a frequency from 40000 draws is at most 0.01
    torch.testing.assert_close(frequencies, probs, atol=0.01, rtol=0)
