"""The KL, entropy and sample-strategy parts ported from Trinity-RFT v0.6, by hand."""

import logging
import math

import pytest
import torch

from trinity.algorithm import (
    ENTROPY_LOSS_FN,
    KL_FN,
    SAMPLE_STRATEGY,
    InvalidArgsError,
    LossNormalizer,
    build,
)
from trinity.types import Experience

LN = math.log


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def close(actual, expected, atol=1e-6):
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float64),
        torch.as_tensor(expected, dtype=torch.float64),
        rtol=0.0,
        atol=atol,
    )


# ---------------------------------------------------------------- corrected_k3

# Delta = logprobs - ref = 0.5, -1, 0.2: k3 = e^-0.5 - 0.5 = 0.106531, e - 2 = 0.718282,
# e^-0.2 - 0.8 = 0.018731. Ratios pi / pi_old = 1.5, 3 (clipped to 2), 0.5.
LOGPROBS = [[-1.0, -2.0, -0.5]]
REF = t([[-1.5, -1.0, -0.7]])
OLD = t(LOGPROBS) - torch.log(t([[1.5, 3.0, 0.5]]))


def test_corrected_k3_weights_k3_by_the_clipped_ratio():
    logprobs = t(LOGPROBS).requires_grad_()
    fn = build(KL_FN, "corrected_k3", {"kl_coef": 0.1})
    # 1.5 * 0.106531 = 0.159796, 2 * 0.718282 = 1.436564, 0.5 * 0.018731 = 0.009365
    close(fn.per_token(logprobs, REF, OLD), [[0.159796, 1.436564, 0.009365]])
    loss, metrics = fn.loss(logprobs, REF, torch.ones(1, 3), "token-mean", old_logprobs=OLD)
    # token-mean 1.605726 / 3 = 0.535242, times kl_coef 0.1
    close(loss, 0.0535242)
    close(metrics["kl_loss"], 0.535242)
    loss.backward()
    # the ratio keeps its gradient: d(r k3) = r k3 + r (1 - e^-Delta) = r Delta where r is
    # not clipped (1.5 * 0.5 = 0.75, 0.5 * 0.2 = 0.1); the clipped t1: 2 (1 - e) = -3.436564
    # times 0.1 / 3
    close(logprobs.grad, [[0.075 / 3, -0.3436564 / 3, 0.01 / 3]])


def test_corrected_k3_without_old_logprobs_is_k3():
    # the reward penalty sees the sampling policy itself (ratio 1), and so does a caller
    # without old log-probs
    k3 = build(KL_FN, "k3")
    corrected = build(KL_FN, "corrected_k3")
    logprobs = t(LOGPROBS)
    close(corrected.per_token(logprobs, REF), [[0.106531, 0.718282, 0.018731]])
    close(corrected.per_token(logprobs, REF, logprobs), k3.per_token(logprobs, REF))
    rewards = t([[0.0, 0.0, 1.0]])
    mask = torch.ones(1, 3)
    close(
        corrected.apply_penalty(rewards, logprobs, REF, mask)[0],
        k3.apply_penalty(rewards, logprobs, REF, mask)[0],
    )


def test_every_kl_loss_accepts_old_logprobs():
    for name in KL_FN.names():
        loss, _ = build(KL_FN, name).loss(t(LOGPROBS), REF, torch.ones(1, 3), old_logprobs=OLD)
        assert torch.isfinite(loss)


# ---------------------------------------------------------------- entropy mix

ENTROPY = [[1.0, 2.0], [3.0, 5.0]]
IS_EXPERT = torch.tensor([False, True])


def test_mix_entropy_leaves_out_the_expert_rows():
    entropy = t(ENTROPY).requires_grad_()
    fn = build(ENTROPY_LOSS_FN, "mix", {"entropy_coef": 0.1})
    loss, metrics = fn(entropy, torch.ones(2, 2), is_expert=IS_EXPERT)
    # row 0 only: -0.1 * mean(1, 2) = -0.15 (default would take mean(1, 2, 3, 5) = 2.75)
    close(loss, -0.15)
    assert metrics == {"entropy": pytest.approx(1.5), "entropy_loss": pytest.approx(-0.15)}
    loss.backward()
    close(entropy.grad, [[-0.05, -0.05], [0.0, 0.0]])


def test_mix_entropy_with_the_rollout_normalizer():
    # the mini-batch holds 4 rollout tokens; this micro-batch's 2: -(1 + 2) / 4
    fn = build(ENTROPY_LOSS_FN, "mix", {"entropy_coef": 1.0})
    norm = LossNormalizer(tokens=4, seqs=2)
    loss, _ = fn(t(ENTROPY), torch.ones(2, 2), normalizer=norm, is_expert=IS_EXPERT)
    close(loss, -0.75)


def test_mix_entropy_without_is_expert_is_default():
    mix = build(ENTROPY_LOSS_FN, "mix", {"entropy_coef": 0.1})
    default = build(ENTROPY_LOSS_FN, "default", {"entropy_coef": 0.1})
    close(mix(t(ENTROPY), torch.ones(2, 2))[0], -0.275)  # -0.1 * 11 / 4
    close(mix(t(ENTROPY), torch.ones(2, 2))[0], default(t(ENTROPY), torch.ones(2, 2))[0])


# ---------------------------------------------------------------- sample strategies


def experience(version):
    return Experience(tokens=torch.arange(4), prompt_length=2, info={"model_version": version})


VERSIONS = (3, 1, 4, 2, 5)


def test_staleness_control_keeps_everything_by_default():
    exps = [experience(v) for v in VERSIONS]
    strategy = build(SAMPLE_STRATEGY, "staleness_control")
    assert strategy.args.max_staleness is None
    # no limit: the first train_batch_size, and no model version needed
    assert strategy.select(exps, 3) == exps[:3]


def test_staleness_control_drops_old_experiences():
    exps = [experience(v) for v in VERSIONS]
    strategy = build(SAMPLE_STRATEGY, "staleness_control", {"max_staleness": 2})
    # current version 5: versions below 5 - 2 = 3 (1 and 2) are dropped
    kept = strategy.select(exps, 10, model_version=5)
    assert [e.model_version for e in kept] == [3, 4, 5]
    with pytest.raises(ValueError, match="model_version"):
        strategy.select(exps, 2)


def test_staleness_limit_is_staleness_control_with_one_version_by_default():
    exps = [experience(v) for v in VERSIONS]
    strategy = build(SAMPLE_STRATEGY, "staleness_limit")
    assert strategy.args.max_staleness == 1
    # current version 5: only 4 and 5 are at most one version behind
    assert [e.model_version for e in strategy.select(exps, 10, model_version=5)] == [4, 5]
    lax = build(SAMPLE_STRATEGY, "staleness_limit", {"max_staleness": None})
    assert lax.select(exps, 10) == exps


def test_negative_staleness_is_refused():
    with pytest.raises(InvalidArgsError, match="max_staleness must be >= 0"):
        build(SAMPLE_STRATEGY, "staleness_control", {"max_staleness": -1})


def test_warmup_is_default_and_says_so(caplog):
    exps = [experience(v) for v in VERSIONS]
    with caplog.at_level(logging.WARNING, logger="trinity.algorithm.sample_strategy"):
        strategy = build(SAMPLE_STRATEGY, "warmup")
    assert "'warmup' is 'default'" in caplog.text
    assert strategy.select(exps, 2) == exps[:2]


def test_a_wrong_strategy_argument_lists_the_valid_ones():
    with pytest.raises(InvalidArgsError, match="'staleness'.*valid arguments: max_staleness"):
        build(SAMPLE_STRATEGY, "staleness_control", {"staleness": 1})
