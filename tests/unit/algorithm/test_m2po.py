"""M2PO (second-moment trust policy optimisation) against hand-computed numbers.

The log-ratios are chosen as round numbers; M2 is the mean of their squares over the
trust-region tokens (A > 0 with log-ratio > 0, or A < 0 with log-ratio < 0).
"""

import math

import pytest
import torch

from trinity.algorithm import ALGORITHM_TYPE, POLICY_LOSS_FN, InvalidArgsError, build
from trinity.algorithm.policy_loss.m2po import m2po_mask


def test_the_largest_squares_are_masked_until_m2_is_below_the_threshold():
    # squares 0.01, 0.04, 0.09: M2 = 0.14 / 3 = 0.0467 > 0.04; without the largest (0.09)
    # M2 = 0.05 / 2 = 0.025 <= 0.04, so only the third token is masked
    log_ratio = torch.tensor([[0.1, 0.2, 0.3]])
    mask, stats = m2po_mask(log_ratio, torch.ones(1, 3), torch.ones(1, 3), threshold=0.04)
    assert mask.tolist() == [[True, True, False]]
    assert stats["m2_before"] == pytest.approx(0.14 / 3)
    assert stats["m2_after"] == pytest.approx(0.025)
    assert stats["masked_fraction"] == pytest.approx(1 / 3)


def test_only_the_trust_region_quadrants_are_constrained():
    # tokens 0 and 1 move against their advantage (A < 0 up, A > 0 down): outside the trust
    # region whatever their square; tokens 2 and 3 are in it with squares 1 and 1: M2 = 1,
    # and without one of them still 1 > 0.1, so both are masked
    log_ratio = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    advantages = torch.tensor([[-1.0, 1.0, 1.0, -1.0]])
    mask, stats = m2po_mask(log_ratio, advantages, torch.ones(1, 4), threshold=0.1)
    assert mask.tolist() == [[True, True, False, False]]
    assert stats["trust_region_fraction"] == pytest.approx(0.5)
    # padding (action_mask 0) is never in the mask, and a batch within the bound keeps all
    mask, _ = m2po_mask(log_ratio, advantages, torch.tensor([[1.0, 1.0, 1.0, 0.0]]), 2.0)
    assert mask.tolist() == [[True, True, True, False]]


def test_loss_divides_by_every_valid_token_and_masked_tokens_get_no_gradient():
    # log-ratios 0.1, 0.2, 0.3 (old 0), A = 1: the third token is masked (see above); the
    # loss is -(e^0.1 + e^0.2) / 3 = -(1.105171 + 1.221403) / 3 = -0.775525 (token-mean
    # over the 3 valid tokens, masked ones included); d loss / d logprob_i = -e^lr_i / 3
    logprobs = torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64, requires_grad=True)
    fn = build(POLICY_LOSS_FN, "m2po")
    loss, metrics = fn(
        logprobs,
        torch.ones(1, 3),
        old_logprobs=torch.zeros(1, 3, dtype=torch.float64),
        advantages=torch.ones(1, 3, dtype=torch.float64),
    )
    assert loss.item() == pytest.approx(-0.775525, abs=1e-6)
    loss.backward()
    assert logprobs.grad.tolist()[0] == pytest.approx([-0.368390, -0.407134, 0.0], abs=1e-6)
    assert metrics["m2po/masked_fraction"] == pytest.approx(1 / 3)
    assert metrics["pg_loss"] == pytest.approx(-0.775525, abs=1e-6)


def test_the_ratio_is_bounded_forward_but_keeps_its_gradient():
    # log-ratio 25 with A = -1 (outside the trust region, kept): forward exp(20) (the
    # bound), and the gradient of the bounded value passes straight through: -A * e^20
    logprobs = torch.tensor([[25.0]], dtype=torch.float64, requires_grad=True)
    loss, _ = build(POLICY_LOSS_FN, "m2po")(
        logprobs,
        torch.ones(1, 1),
        old_logprobs=torch.zeros(1, 1, dtype=torch.float64),
        advantages=-torch.ones(1, 1, dtype=torch.float64),
    )
    loss.backward()
    assert loss.item() == pytest.approx(math.exp(20.0))
    assert logprobs.grad.item() == pytest.approx(math.exp(20.0))


def test_arguments_are_checked():
    with pytest.raises(InvalidArgsError, match="m2_threshold must be >= 0"):
        build(POLICY_LOSS_FN, "m2po", {"m2_threshold": -0.01})
    with pytest.raises(InvalidArgsError, match="loss_agg_mode.*valid: token-mean"):
        build(POLICY_LOSS_FN, "m2po", {"loss_agg_mode": "seq-mean-token-mean"})


def test_m2po_type_record():
    spec = ALGORITHM_TYPE.get("m2po")
    assert (spec.policy_loss_fn, spec.advantage_fn) == ("m2po", "grpo")
    assert (spec.kl_loss_fn, spec.kl_penalty_fn, spec.entropy_loss_fn) == ("none",) * 3
    assert not spec.needs_reference and not spec.use_critic and spec.needs_group
