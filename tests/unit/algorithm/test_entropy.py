"""The entropy bonus."""

import pytest
import torch

from trinity.algorithm import ENTROPY_LOSS_FN, LossNormalizer, build

ENTROPY = torch.tensor([[1.0, 2.0, 3.0]])
MASK = torch.tensor([[1, 1, 0]])


def test_default_entropy_loss():
    entropy = ENTROPY.clone().requires_grad_(True)
    loss, metrics = build(ENTROPY_LOSS_FN, "default", {"entropy_coef": 0.01})(entropy, MASK)
    # -0.01 * mean(1, 2)
    assert loss.item() == pytest.approx(-0.015)
    assert metrics == {"entropy": pytest.approx(1.5), "entropy_loss": pytest.approx(-0.015)}
    loss.backward()
    assert entropy.grad.tolist() == [pytest.approx([-0.005, -0.005, 0.0])]


def test_entropy_loss_uses_the_mini_batch_normalizer():
    fn = build(ENTROPY_LOSS_FN, "default", {"entropy_coef": 1.0})
    # the mini-batch has 4 valid tokens, this micro-batch 2: -(1 + 2) / 4
    norm = LossNormalizer(tokens=4, seqs=2)
    loss, _ = fn(ENTROPY, MASK, loss_agg_mode="token-mean", normalizer=norm)
    assert loss.item() == pytest.approx(-0.75)


def test_none_entropy_loss_still_reports_entropy():
    loss, metrics = build(ENTROPY_LOSS_FN, "none")(ENTROPY, MASK)
    assert loss.item() == 0.0
    assert metrics == {"entropy": pytest.approx(1.5)}
