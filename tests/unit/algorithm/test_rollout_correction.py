"""Truncated importance sampling weights of rollout correction, checked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from trinity.algorithm import POLICY_LOSS_FN, build
from trinity.algorithm.rollout_correction import rollout_is_weights

# three tokens: log(pi_old / pi_rollout) = [0, 0.5, 1.5]
OLD = torch.tensor([[-1.0, -2.0, -0.5]])
ROLLOUT = torch.tensor([[-1.0, -2.5, -2.0]])


def test_token_weights_are_the_ratio_capped_at_the_threshold():
    weights, metrics = rollout_is_weights(OLD, ROLLOUT, torch.ones(1, 3), threshold=2.0)
    # exp([0, 0.5, 1.5]) = [1, 1.648721, 4.481689]; the cap 2 cuts the last one
    assert weights.tolist() == [pytest.approx([1.0, 1.648721, 2.0], abs=1e-6)]
    assert not weights.requires_grad
    # mean (1 + 1.648721 + 2) / 3 = 1.549574; one ratio of three above the cap
    assert metrics["rollout_is_mean"] == pytest.approx(1.549574, abs=1e-6)
    assert metrics["rollout_is_min"] == pytest.approx(1.0)
    assert metrics["rollout_is_max"] == pytest.approx(2.0)
    assert metrics["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3)
    # ESS = (sum w)^2 / (n sum w^2) = 4.648721^2 / (3 * (1 + 2.718282 + 4)) = 0.933308
    assert metrics["rollout_is_eff_sample_size"] == pytest.approx(0.933308, abs=1e-5)
    # kl = mean(rollout - old) = (0 - 0.5 - 1.5) / 3
    assert metrics["kl"] == pytest.approx(-2 / 3)
    # k3 = mean(e^d - 1 - d), d = [0, -0.5, -1.5]: (0 + 0.106531 + 0.723130) / 3
    assert metrics["k3_kl"] == pytest.approx(0.276554, abs=1e-6)


def test_masked_tokens_get_no_weight_and_sequence_level_sums_the_log_ratios():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    token, _ = rollout_is_weights(OLD, ROLLOUT, mask)
    assert token.tolist() == [pytest.approx([1.0, 1.648721, 0.0], abs=1e-6)]
    # sequence: exp(0 + 0.5) = 1.648721 on both valid tokens (the masked 1.5 left out)
    seq, metrics = rollout_is_weights(OLD, ROLLOUT, mask, level="sequence")
    assert seq.tolist() == [pytest.approx([1.648721, 1.648721, 0.0], abs=1e-6)]
    assert metrics["rollout_is_mean"] == pytest.approx(math.exp(0.5), abs=1e-6)
    # sequence with every token: exp(2) = 7.389 > 3, capped for the whole sequence
    capped, metrics = rollout_is_weights(
        OLD, ROLLOUT, torch.ones(1, 3), level="sequence", threshold=3.0
    )
    assert capped.tolist() == [[3.0, 3.0, 3.0]]
    assert metrics["rollout_is_ratio_fraction_high"] == 1.0


def test_batch_normalize_rescales_to_mean_one():
    weights, metrics = rollout_is_weights(OLD, ROLLOUT, torch.ones(1, 3), batch_normalize=True)
    # [1, 1.648721, 2] / 1.549574
    assert weights.tolist() == [pytest.approx([0.645339, 1.063992, 1.290678], abs=1e-5)]
    assert metrics["rollout_is_mean"] == pytest.approx(1.0)


def test_unknown_level_is_refused():
    with pytest.raises(ValueError, match="rollout_is must be one of"):
        rollout_is_weights(OLD, ROLLOUT, torch.ones(1, 3), level="geometric")


def test_ppo_loss_multiplies_each_token_by_its_weight():
    ppo = build(POLICY_LOSS_FN, "ppo", {})
    logprobs = torch.tensor([[-1.0, -1.0, -1.0]], requires_grad=True)
    advantages = torch.tensor([[1.0, 1.0, -1.0]])
    kwargs = dict(old_logprobs=logprobs.detach(), advantages=advantages)
    # ratio 1 everywhere: per-token loss -A = [-1, -1, 1], token-mean -1/3
    plain, _ = ppo(logprobs, torch.ones(1, 3), **kwargs)
    assert plain.item() == pytest.approx(-1 / 3)
    # times w = [1, 1.5, 2]: [-1, -1.5, 2], token-mean -0.5 / 3
    weighted, metrics = ppo(
        logprobs, torch.ones(1, 3), rollout_is_weights=torch.tensor([[1.0, 1.5, 2.0]]), **kwargs
    )
    assert weighted.item() == pytest.approx(-0.5 / 3)
    assert metrics["pg_loss"] == pytest.approx(-0.5 / 3)
    weighted.backward()
    # d/dlogprobs of -A * w * exp(logprobs - old) / 3 at ratio 1: -A * w / 3
    assert logprobs.grad.tolist() == [pytest.approx([-1 / 3, -0.5, 2 / 3])]
