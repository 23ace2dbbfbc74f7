"""Advantage functions against hand-computed numbers."""

import math

import pytest
import torch

from trinity.algorithm import ADVANTAGE_FN, AdvantageInputs, MissingInputError, build
from trinity.algorithm.advantage.base import discounted_returns, group_stats
from trinity.algorithm.advantage.ppo import gae

# rows 0-2 answer task A with rewards 1, 0, 0; row 3 is alone in its group (reward 0.5)
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)
GROUPS = torch.tensor([7, 7, 7, 9])


def outcome_inputs(rewards=(1.0, 0.0, 0.0, 0.5), mask=MASK, groups=GROUPS, **extra):
    """The scalar reward on each row's last valid token."""
    token_rewards = torch.zeros(mask.shape)
    last = mask.long().cumsum(-1).argmax(-1)
    token_rewards[torch.arange(mask.shape[0]), last] = torch.tensor(rewards)
    return AdvantageInputs(token_rewards, mask, groups, **extra)


def per_row(advantages: torch.Tensor) -> list[float]:
    return advantages[:, 0].tolist()


def test_group_stats():
    stats = group_stats(torch.tensor([1.0, 0.0, 0.0, 0.5]), GROUPS)
    # group 7: mean 1/3, sample std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    assert stats.mean.tolist() == pytest.approx([1 / 3] * 3 + [0.5])
    assert stats.std.tolist() == pytest.approx([math.sqrt(1 / 3)] * 3 + [0.0])
    assert stats.size.tolist() == [3, 3, 3, 1]


def test_grpo():
    adv, returns = build(ADVANTAGE_FN, "grpo")(outcome_inputs())
    # (1 - 1/3) / sqrt(1/3) = 1.1547, (0 - 1/3) / sqrt(1/3) = -0.57735; group of one -> 0
    expected = [1.154700, -0.577350, -0.577350, 0.0]
    assert per_row(adv) == pytest.approx(expected, abs=1e-5)
    # spread over the valid tokens only
    assert adv[0].tolist() == pytest.approx([1.154700, 1.154700, 0.0], abs=1e-5)
    assert adv[2, 1:].tolist() == [0.0, 0.0]
    assert torch.equal(returns, adv)


def test_grpo_without_std():
    adv, _ = build(ADVANTAGE_FN, "grpo", {"std_normalize": False})(outcome_inputs())
    # r - mean: 2/3, -1/3, -1/3; group of one -> 0
    assert per_row(adv) == pytest.approx([2 / 3, -1 / 3, -1 / 3, 0.0])


def test_grpo_identical_rewards_give_zero():
    inputs = outcome_inputs(rewards=(1.0, 1.0, 1.0, 1.0))
    adv, _ = build(ADVANTAGE_FN, "grpo")(inputs)
    assert adv.abs().max().item() == 0.0


def test_opmd_mean_baseline():
    adv, _ = build(ADVANTAGE_FN, "opmd")(outcome_inputs())
    # r - mean(1, 0, 0); group of one -> 0
    assert per_row(adv) == pytest.approx([2 / 3, -1 / 3, -1 / 3, 0.0])


@pytest.mark.parametrize(
    ("tau", "baseline"),
    [
        (1.0, 0.452832),  # log((e + 1 + 1) / 3)
        (0.5, 0.570466),  # 0.5 * log((e^2 + 2) / 3)
    ],
)
def test_opmd_logavgexp_baseline(tau, baseline):
    fn = build(ADVANTAGE_FN, "opmd", {"opmd_baseline": "logavgexp", "tau": tau})
    adv, _ = fn(outcome_inputs())
    assert per_row(adv) == pytest.approx([1 - baseline, -baseline, -baseline, 0.0], abs=1e-6)


def test_opmd_logavgexp_is_stable_for_small_tau():
    # 0.01 * log((e^100 + e^0) / 2) = 1 - 0.01 * log 2 (+ e^-100), no overflow
    fn = build(ADVANTAGE_FN, "opmd", {"opmd_baseline": "logavgexp", "tau": 0.01})
    mask = torch.ones(2, 1, dtype=torch.bool)
    adv, _ = fn(outcome_inputs((1.0, 0.0), mask, torch.tensor([0, 0])))
    baseline = 1 - 0.01 * math.log(2)
    assert per_row(adv) == pytest.approx([1 - baseline, -baseline], abs=1e-6)


def test_rloo():
    adv, returns = build(ADVANTAGE_FN, "rloo")(outcome_inputs())
    # 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -0.5; group of one -> 0
    assert per_row(adv) == pytest.approx([1.0, -0.5, -0.5, 0.0])
    assert torch.equal(returns, adv)


def test_gae_by_hand():
    # gamma = lam = 1: A_1 = 1 + 0 - 0.2 = 0.8; A_0 = (0 + 0.2 - 0.5) + 0.8 = 0.5
    rewards = torch.tensor([[0.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 0.2, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    adv, returns = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert adv.tolist() == [pytest.approx([0.5, 0.8, 0.0])]
    assert returns.tolist() == [pytest.approx([1.0, 1.0, 0.0])]


def test_gae_skips_masked_tokens_inside_the_response():
    # gamma = lam = 0.5, position 1 masked (an environment token):
    # A_2 = 1 - 0.6 = 0.4; A_0 = (0 + 0.5 * 0.6 - 0.2) + 0.25 * 0.4 = 0.2
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 7.0, 0.6]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    adv, returns = gae(rewards, values, mask, gamma=0.5, lam=0.5)
    assert adv.tolist() == [pytest.approx([0.2, 0.0, 0.4])]
    assert returns.tolist() == [pytest.approx([0.4, 0.0, 1.0])]


def test_ppo_advantage_whitens_over_the_batch():
    inputs = AdvantageInputs(
        token_level_rewards=torch.tensor([[0.0, 0.0, 1.0]]),
        action_mask=torch.tensor([[1, 0, 1]], dtype=torch.bool),
        group_ids=torch.tensor([0]),
        values=torch.tensor([[0.2, 7.0, 0.6]]),
    )
    adv, returns = build(ADVANTAGE_FN, "ppo", {"gamma": 0.5, "lam": 0.5})(inputs)
    # raw [0.2, -, 0.4]: mean 0.3, sample std sqrt(0.02) -> -/+ 0.1 / 0.141421
    assert adv.tolist() == [pytest.approx([-0.707107, 0.0, 0.707107], abs=1e-5)]
    assert returns.tolist() == [pytest.approx([0.4, 0.0, 1.0])]


def test_ppo_advantage_needs_values():
    with pytest.raises(MissingInputError, match="critic"):
        build(ADVANTAGE_FN, "ppo")(outcome_inputs())


def test_discounted_returns():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    # row 0: 0.25, 0.5, 1; row 1: the masked 9 is ignored -> 0.25, 0.5, 0
    returns = discounted_returns(rewards, mask, gamma=0.5)
    assert returns.tolist() == [[0.25, 0.5, 1.0], [0.25, 0.5, 0.0]]


def test_reinforce_plus_plus():
    inputs = AdvantageInputs(
        token_level_rewards=torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 9.0]]),
        action_mask=torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool),
        group_ids=torch.tensor([0, 1]),
    )
    adv, returns = build(ADVANTAGE_FN, "reinforceplusplus", {"gamma": 0.5})(inputs)
    # returns 0.25, 0.5, 1 | 0.25, 0.5: mean 0.5, sample var 0.375 / 4 = 0.09375
    # whitened: -0.25 / 0.306186 = -0.816497, 0, 0.5 / 0.306186 = 1.632993
    assert adv.tolist()[0] == pytest.approx([-0.816497, 0.0, 1.632993], abs=1e-5)
    assert adv.tolist()[1] == pytest.approx([-0.816497, 0.0, 0.0], abs=1e-5)
    assert returns.tolist() == [[0.25, 0.5, 1.0], [0.25, 0.5, 0.0]]


def test_remax():
    inputs = AdvantageInputs(
        # row 1 carries a per-token KL penalty of -0.1 besides its reward of 1.0
        token_level_rewards=torch.tensor([[0.0, 1.0, 0.0], [-0.1, -0.1, 0.8]]),
        action_mask=torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool),
        group_ids=torch.tensor([0, 1]),
        baseline_rewards=torch.tensor([0.5, 1.0]),
    )
    adv, returns = build(ADVANTAGE_FN, "remax")(inputs)
    # returns: [1, 1, 0] and [0.6, 0.7, 0.8]; minus the greedy rewards 0.5 and 1.0
    assert returns.tolist()[1] == pytest.approx([0.6, 0.7, 0.8])
    assert adv.tolist()[0] == pytest.approx([0.5, 0.5, 0.0])
    assert adv.tolist()[1] == pytest.approx([-0.4, -0.3, -0.2])


def test_remax_needs_baseline():
    with pytest.raises(MissingInputError, match="greedy"):
        build(ADVANTAGE_FN, "remax")(outcome_inputs())


def test_advantages_carry_no_gradient():
    inputs = outcome_inputs()
    inputs.token_level_rewards.requires_grad_(True)
    adv, _ = build(ADVANTAGE_FN, "grpo")(inputs)
    assert not adv.requires_grad
