"""Loss aggregation modes and their invariance under micro-batching."""

import pytest
import torch

from trinity.algorithm import POLICY_LOSS_FN, LossNormalizer, aggregate_loss, build
from trinity.algorithm.loss_agg import LOSS_AGG_MODES, UnknownLossAggModeError

# row 0: tokens 1, 2 valid; row 1: token 4 valid; row 2: nothing valid (ignored, even NaN)
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [float("nan"), 8.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 valid tokens
        ("seq-mean-token-sum", 3.5),  # ((1 + 2) + 4) / 2 sequences
        ("seq-mean-token-mean", 2.75),  # (1.5 + 4) / 2 sequences
        ("seq-mean-token-sum-norm", 7 / 6),  # (3 + 4) / (2 sequences * R = 3)
    ],
)
def test_modes_by_hand(mode, expected):
    assert aggregate_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_sum_norm_uses_the_configured_max_response_length():
    # (3 + 4) / (2 sequences * L = 7)
    norm = LossNormalizer.from_mask(MASK, max_response_length=7)
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm).item() == pytest.approx(0.5)


def test_all_masked_gives_zero_not_nan():
    loss = aggregate_loss(LOSS, torch.zeros_like(MASK), "token-mean")
    assert loss.item() == 0.0


def test_unknown_mode_names_the_valid_ones():
    with pytest.raises(UnknownLossAggModeError, match="seq-mean-token-mean"):
        aggregate_loss(LOSS, MASK, "mean")


def test_normalizer_counts_and_addition():
    norm = LossNormalizer.from_mask(MASK)
    assert (norm.tokens, norm.seqs) == (3.0, 2.0)
    # counts are additive over row splits of the mini-batch
    assert LossNormalizer.from_mask(MASK[:1]) + LossNormalizer.from_mask(MASK[1:]) == norm


def _random_batch(seed: int, rows: int = 8, width: int = 6):
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(rows, width, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    mask = torch.arange(width)[None, :] < lengths[:, None]
    return loss, mask


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batch_losses_sum_to_the_full_loss(mode):
    loss, mask = _random_batch(0)
    norm = LossNormalizer.from_mask(mask)
    full = aggregate_loss(loss, mask, mode)
    parts = sum(
        aggregate_loss(loss[i : i + 2], mask[i : i + 2], mode, norm) for i in range(0, 8, 2)
    )
    assert parts.item() == pytest.approx(full.item(), abs=1e-12)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_invariance_with_micro_batches_trimmed_to_their_own_width(mode):
    # a trainer may pad each micro-batch only to its longest response; with the
    # configured max_response_length every mode still adds up
    loss, mask = _random_batch(1)
    norm = LossNormalizer.from_mask(mask, max_response_length=6)
    full = aggregate_loss(loss, mask, mode, norm)
    total = 0.0
    for i in range(0, 8, 2):
        width = int(mask[i : i + 2].sum(-1).max())
        total += aggregate_loss(loss[i : i + 2, :width], mask[i : i + 2, :width], mode, norm)
    assert total.item() == pytest.approx(full.item(), abs=1e-12)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_gradient_accumulation_matches_full_batch(mode):
    """A tiny linear policy: batch of 8 vs 4 micro-batches of 2 with accumulation."""
    torch.manual_seed(0)
    features = torch.randn(8, 5, 3, dtype=torch.float64)
    lengths = torch.tensor([5, 1, 3, 4, 2, 5, 1, 3])
    mask = torch.arange(5)[None, :] < lengths[:, None]
    advantages = torch.randn(8, 5, dtype=torch.float64)
    old_logprobs = -torch.rand(8, 5, dtype=torch.float64)
    loss_fn = build(POLICY_LOSS_FN, "ppo", {"loss_agg_mode": mode})

    def grad(chunks: int) -> torch.Tensor:
        layer = torch.nn.Linear(3, 1, dtype=torch.float64)
        torch.nn.init.constant_(layer.weight, 0.1)
        torch.nn.init.constant_(layer.bias, -0.5)
        norm = LossNormalizer.from_mask(mask, max_response_length=5)
        for rows in torch.arange(8).chunk(chunks):
            logprobs = -torch.nn.functional.softplus(layer(features[rows]).squeeze(-1))
            loss, _ = loss_fn(
                logprobs,
                mask[rows],
                old_logprobs=old_logprobs[rows],
                advantages=advantages[rows],
                normalizer=norm,
            )
            loss.backward()
        return torch.cat([layer.weight.grad.flatten(), layer.bias.grad])

    full, accumulated = grad(1), grad(4)
    assert full.abs().sum() > 0
    torch.testing.assert_close(accumulated, full, atol=1e-6, rtol=0)
