"""KL estimators, the KL loss and the KL reward penalty."""

import pytest
import torch

from trinity.algorithm import KL_FN, build

# log_ratio = logprobs - ref = [0.5, -1, 2.5]; the last token is masked
LOGPROBS = torch.tensor([[-1.0, -2.0, -0.5]])
REF = torch.tensor([[-1.5, -1.0, -3.0]])
MASK = torch.tensor([[1, 1, 0]], dtype=torch.bool)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("k1", [0.5, -1.0]),
        ("k2", [0.125, 0.5]),  # 0.5 * r^2
        ("k3", [0.106531, 0.718282]),  # e^-0.5 - 1 + 0.5, e^1 - 1 - 1
        ("low_var_kl", [0.106531, 0.718282]),  # k3 within its clamp
        ("abs", [0.5, 1.0]),
        ("none", [0.0, 0.0]),
    ],
)
def test_per_token(name, expected):
    kl = build(KL_FN, name).per_token(LOGPROBS, REF)
    assert kl[0, :2].tolist() == pytest.approx(expected, abs=1e-6)


def test_low_var_kl_is_clamped():
    # log_ratio -30: k3 = e^30 - 31 -> 10; log_ratio 30: e^-30 - 1 + 30 ~ 29 -> 10
    kl = build(KL_FN, "low_var_kl").per_token(torch.tensor([-30.0, 30.0]), torch.zeros(2))
    assert kl.tolist() == [10.0, 10.0]


def test_kl_loss_is_weighted_and_aggregated():
    fn = build(KL_FN, "k2", {"kl_coef": 0.1})
    loss, metrics = fn.loss(LOGPROBS, REF, MASK, "token-mean")
    # token-mean of k2 over valid tokens: (0.125 + 0.5) / 2 = 0.3125; * 0.1
    assert loss.item() == pytest.approx(0.03125)
    assert metrics == {"kl_loss": pytest.approx(0.3125), "kl_coef": 0.1}


def test_kl_loss_gradient():
    logprobs = LOGPROBS.clone().requires_grad_(True)
    loss, _ = build(KL_FN, "k1", {"kl_coef": 0.5}).loss(logprobs, REF, MASK)
    loss.backward()
    # d/dlogprob of 0.5 * mean(log_ratio) over 2 tokens
    assert logprobs.grad.tolist() == [[0.25, 0.25, 0.0]]


def test_kl_penalty_on_rewards():
    rewards = torch.tensor([[0.0, 1.0, 0.0]])
    fn = build(KL_FN, "k1", {"kl_coef": 0.1})
    new_rewards, metrics = fn.apply_penalty(rewards, LOGPROBS, REF, MASK)
    # r - 0.1 * [0.5, -1, (masked)]
    assert new_rewards.tolist() == [pytest.approx([-0.05, 1.1, 0.0])]
    # summed token KL of the one sequence: 0.5 - 1
    assert metrics == {"kl": pytest.approx(-0.5), "kl_coef": 0.1}


def test_none_leaves_rewards_and_loss_at_zero():
    fn = build(KL_FN, "none")
    rewards = torch.tensor([[0.0, 1.0, 0.0]])
    assert fn.apply_penalty(rewards, LOGPROBS, REF, MASK)[0] is rewards
    assert fn.loss(LOGPROBS, REF, MASK)[0].item() == 0.0
    assert not fn.uses_reference and build(KL_FN, "k3").uses_reference
