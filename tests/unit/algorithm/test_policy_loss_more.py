"""The policy losses ported from Trinity-RFT v0.6, against hand-computed numbers.

Every example writes its arithmetic in a comment; ``old_logprobs`` are chosen so the
ratios rho = exp(logprobs - old_logprobs) are round numbers. Gradients are of the
aggregated loss with respect to ``logprobs``.
"""

import math

import pytest
import torch

from trinity.algorithm import (
    POLICY_LOSS_FN,
    InvalidArgsError,
    LossNormalizer,
    MissingInputError,
    build,
)
from trinity.algorithm.policy_loss.chord import chord_mu

LN = math.log


def leaf(values):
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def close(actual, expected, atol=1e-6):
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float64),
        torch.as_tensor(expected, dtype=torch.float64),
        rtol=0.0,
        atol=atol,
    )


def with_ratios(logprobs, ratios):
    """old_logprobs giving ``ratios`` for ``logprobs`` (nested lists, same shape)."""
    return t(logprobs) - torch.log(t(ratios))


# ---------------------------------------------------------------- topr


def test_topr_truncates_the_weight_of_non_positive_examples():
    # ratios 2, 0.5, 4 and a masked token; A = 1, -1, -0.5; logprobs -1, -0.5, -2
    # t0: A > 0 -> alpha 1 (its ratio 2 is ignored); l = -1 * 1 * -1 = 1
    # t1: A <= 0 -> alpha = min(0.5, 1) = 0.5; l = -0.5 * -1 * -0.5 = -0.25
    # t2: A <= 0 -> alpha = min(4, 1) = 1; l = -1 * -0.5 * -2 = -1
    # token-mean: (1 - 0.25 - 1) / 3 = -0.25 / 3
    lp = [[-1.0, -0.5, -2.0, -0.1]]
    logprobs = leaf(lp)
    old = with_ratios(lp, [[2.0, 0.5, 4.0, 1.0]])
    adv = t([[1.0, -1.0, -0.5, 3.0]])
    mask = t([[1, 1, 1, 0]])
    loss, metrics = build(POLICY_LOSS_FN, "topr")(logprobs, mask, old_logprobs=old, advantages=adv)
    close(loss, -0.25 / 3)
    close(metrics["pg_loss"], -0.25 / 3)
    close(metrics["topr_alpha"], 2.5 / 3)  # mean(1, 0.5, 1)
    loss.backward()
    # alpha carries no gradient: d l / d logprob = -alpha * A, / 3 tokens
    close(logprobs.grad, [[-1.0 / 3, 0.5 / 3, 0.5 / 3, 0.0]])


def test_topr_advantage_threshold_decides_what_is_positive():
    # ratio 0.25, A = 1, logprob -1. Threshold 0: positive, alpha 1, l = 1.
    # threshold 2: A = 1 <= 2 counts as negative, alpha = 0.25, l = 0.25
    old = with_ratios([[-1.0]], [[0.25]])
    for threshold, expected in ((0.0, 1.0), (2.0, 0.25)):
        fn = build(POLICY_LOSS_FN, "topr", {"advantage_threshold": threshold})
        logprobs = leaf([[-1.0]])
        loss, _ = fn(logprobs, t([[1]]), old_logprobs=old, advantages=t([[1.0]]))
        close(loss, expected)
        loss.backward()
        close(logprobs.grad, [[-expected]])


# ---------------------------------------------------------------- cispo


def cispo_batch():
    # ratios 1.5, 0.5, 1.1 and a masked token; A = 1, -1, 2; logprobs -1, -2, -0.5
    lp = [[-1.0, -2.0, -0.5, -4.0]]
    return leaf(lp), with_ratios(lp, [[1.5, 0.5, 1.1, 1.0]]), t([[1.0, -1.0, 2.0, 5.0]])


def test_cispo_clips_the_weight_and_keeps_every_gradient():
    logprobs, old, adv = cispo_batch()
    mask = t([[1, 1, 1, 0]])
    loss, metrics = build(POLICY_LOSS_FN, "cispo")(logprobs, mask, old_logprobs=old, advantages=adv)
    # weights clip(rho, 1 - 1.0, 1 + 0.28) = 1.28, 0.5, 1.1
    # l = -A * w * logprob: -1 * 1.28 * -1 = 1.28; 1 * 0.5 * -2 = -1; -2 * 1.1 * -0.5 = 1.1
    # token-mean: (1.28 - 1 + 1.1) / 3 = 0.46
    close(loss, 0.46)
    close(metrics["pg_clipfrac"], 1 / 3)  # t0 only
    close(metrics["cispo_dropfrac"], 0.0)
    loss.backward()
    # the weight is a constant: d l / d logprob = -A * w / 3, also for the clipped t0
    # (PPO would give it none); a differentiable weight would give t2 -2 * 1.1 * 0.5 / 3
    close(logprobs.grad, [[-1.28 / 3, 0.5 / 3, -2.2 / 3, 0.0]])


def test_cispo_mask_clip_drops_the_tokens_ppo_would_drop():
    logprobs, old, adv = cispo_batch()
    mask = t([[1, 1, 1, 0]])
    fn = build(POLICY_LOSS_FN, "cispo", {"enable_mask_clip": True, "mask_clip_range_low": 0.4})
    loss, metrics = fn(logprobs, mask, old_logprobs=old, advantages=adv)
    # t0: rho 1.5 > 1 + 0.28 with A > 0: dropped; t1: rho 0.5 < 1 - 0.4 with A < 0: dropped
    # t2 alone: 1.1 / 3
    close(loss, 1.1 / 3)
    close(metrics["cispo_dropfrac"], 2 / 3)
    loss.backward()
    close(logprobs.grad, [[0.0, 0.0, -2.2 / 3, 0.0]])


# ---------------------------------------------------------------- sft_is / sft_phi


def test_sft_is_weights_each_token_by_its_probability():
    # p = 0.5, 0.25 and a masked token; l = -p * ln p
    # t0: -0.5 ln 0.5 = 0.5 ln 2; t1: -0.25 ln 0.25 = 0.5 ln 2; token-mean 0.5 ln 2
    logprobs = leaf([[LN(0.5), LN(0.25), LN(0.8)]])
    loss, metrics = build(POLICY_LOSS_FN, "sft_is")(logprobs, t([[1, 1, 0]]))
    close(loss, 0.5 * LN(2))
    close(metrics["sft_loss"], 0.5 * LN(2))
    loss.backward()
    # p is a constant: d l / d logprob = -p / 2
    close(logprobs.grad, [[-0.25, -0.125, 0.0]])


def test_sft_phi_weights_by_p_times_one_minus_p():
    # phi = p (1 - p) = 0.25, 0.1875; l = -phi * ln p
    # t0: 0.25 ln 2; t1: 0.1875 * 2 ln 2 = 0.375 ln 2; token-mean 0.3125 ln 2
    logprobs = leaf([[LN(0.5), LN(0.25), LN(0.8)]])
    loss, _ = build(POLICY_LOSS_FN, "sft_phi")(logprobs, t([[1, 1, 0]]))
    close(loss, 0.3125 * LN(2))
    loss.backward()
    close(logprobs.grad, [[-0.125, -0.09375, 0.0]])


def test_sft_phi_cutoff_stops_the_gradient_of_likely_tokens():
    # cutoff 0.4: t0 (p 0.5) uses ln 0.4 instead of ln 0.5 and has no gradient
    # t0: -0.25 ln 0.4 = 0.229073; t1: 0.375 ln 2 = 0.259930; token-mean 0.244501
    logprobs = leaf([[LN(0.5), LN(0.25), LN(0.8)]])
    fn = build(POLICY_LOSS_FN, "sft_phi", {"cutoff_prob": 0.4})
    loss, _ = fn(logprobs, t([[1, 1, 0]]))
    close(loss, 0.244501)
    loss.backward()
    close(logprobs.grad, [[0.0, -0.09375, 0.0]])


# ---------------------------------------------------------------- mix_chord


@pytest.mark.parametrize(
    "step, mu",
    [
        (0, 0.0),  # warm-up: 0.5 * 0 / 4
        (2, 0.25),  # warm-up: 0.5 * 2 / 4
        (4, 0.5),  # peak: 0.1 + 0.4 * (1 + cos 0) / 2
        (6, 0.3),  # half-way down: 0.1 + 0.4 * (1 + cos(pi / 2)) / 2
        (8, 0.1),  # valley
        (100, 0.1),
    ],
)
def test_chord_mu_schedule(step, mu):
    assert chord_mu(step, 4, 4, 0.5, 0.1) == pytest.approx(mu)


def test_chord_mu_without_warmup_or_decay_is_the_valley():
    assert chord_mu(0, 0, 0, 0.3, 0.1) == pytest.approx(0.1)


def chord_batch():
    # row 0, rollout: ratio 1, A = 2; row 1, expert: p = 0.5, 0.25
    logprobs = leaf([[-1.0, -1.0], [LN(0.5), LN(0.25)]])
    old = t([[-1.0, -1.0], [0.0, 0.0]])
    adv = t([[2.0, 2.0], [0.0, 0.0]])
    return logprobs, old, adv, torch.ones(2, 2), torch.tensor([False, True])


CHORD_ARGS = {"mu_warmup_steps": 4, "mu_decay_steps": 4, "mu_peak": 0.5, "mu_valley": 0.1}


def test_mix_chord_weights_ppo_and_phi_sft_by_the_scheduled_mu():
    logprobs, old, adv, mask, is_expert = chord_batch()
    fn = build(POLICY_LOSS_FN, "mix_chord", CHORD_ARGS)
    loss, metrics = fn(
        logprobs, mask, old_logprobs=old, advantages=adv, is_expert=is_expert, global_step=2
    )
    # step 2: mu 0.25. ppo on row 0: -A * 1 = -2; sft_phi on row 1: 0.3125 ln 2 = 0.216608
    # 0.75 * -2 + 0.25 * 0.216608 = -1.445848
    close(loss, -1.445848)
    close(metrics["pg_loss"], -2.0)
    close(metrics["sft_loss"], 0.3125 * LN(2))
    close(metrics["chord_mu"], 0.25)
    loss.backward()
    # row 0: 0.75 * -A / 2 tokens = -0.75; row 1: 0.25 * -phi / 2 = -0.03125, -0.0234375
    close(logprobs.grad, [[-0.75, -0.75], [-0.03125, -0.0234375]])


def test_mix_chord_without_phi_uses_plain_sft():
    logprobs, old, adv, mask, is_expert = chord_batch()
    fn = build(POLICY_LOSS_FN, "mix_chord", {**CHORD_ARGS, "enable_phi_function": False})
    loss, _ = fn(
        logprobs, mask, old_logprobs=old, advantages=adv, is_expert=is_expert, global_step=2
    )
    # sft: -(ln 0.5 + ln 0.25) / 2 = 1.5 ln 2 = 1.039721; 0.75 * -2 + 0.25 * 1.039721
    close(loss, -1.240070)


def test_mix_chord_micro_batches_with_one_kind_each_add_up():
    logprobs, old, adv, mask, is_expert = chord_batch()
    fn = build(POLICY_LOSS_FN, "mix_chord", CHORD_ARGS)
    norm = LossNormalizer.from_mask(mask[~is_expert])
    expert_norm = LossNormalizer.from_mask(mask[is_expert])
    total = 0.0
    for row in (0, 1):
        rows = slice(row, row + 1)
        loss, _ = fn(
            logprobs[rows],
            mask[rows],
            old_logprobs=old[rows],
            advantages=adv[rows],
            is_expert=is_expert[rows],
            normalizer=norm,
            expert_normalizer=expert_norm,
            global_step=2,
        )
        total = total + loss
    close(total, -1.445848)


def test_mix_chord_needs_the_step():
    logprobs, old, adv, mask, is_expert = chord_batch()
    fn = build(POLICY_LOSS_FN, "mix_chord")
    with pytest.raises(MissingInputError, match="global_step"):
        fn(logprobs, mask, old_logprobs=old, advantages=adv, is_expert=is_expert)


# ---------------------------------------------------------------- sppo


def test_sppo_keeps_the_tokens_inside_the_trust_region():
    # epsilon 0.3: region [1 / 1.3, 1.3] = [0.769, 1.3]
    # ratios 1.2, 0.5, 1.5, 0.8 and a masked token; A = 1, -1, 2, -1
    # t0 in: -1 * ln 1.2; t1 out (0.5); t2 out (1.5); t3 in: 1 * ln 0.8
    # token-mean: (ln 0.8 - ln 1.2) / 4 = ln(2 / 3) / 4 = -0.101366
    lp = [[-1.0, -2.0, -0.5, -1.5, -3.0]]
    logprobs = leaf(lp)
    old = with_ratios(lp, [[1.2, 0.5, 1.5, 0.8, 1.0]])
    adv = t([[1.0, -1.0, 2.0, -1.0, 5.0]])
    mask = t([[1, 1, 1, 1, 0]])
    loss, metrics = build(POLICY_LOSS_FN, "sppo")(logprobs, mask, old_logprobs=old, advantages=adv)
    close(loss, LN(2 / 3) / 4)
    close(metrics["pg_clipfrac"], 0.5)
    loss.backward()
    # inside: d(-A * log-ratio) / d logprob = -A, / 4 tokens; outside: 0
    close(logprobs.grad, [[-0.25, 0.0, 0.0, 0.25, 0.0]])


# ---------------------------------------------------------------- rec

# five tokens, logprob -1 each, so l_t = -A_t * -1 * in_t = A_t * in_t
REC_RATIOS = [[1.5, 0.5, 1.1, 0.3, 2.0]]
REC_ADV = [[2.0, -1.0, -0.5, 1.0, -4.0]]


@pytest.mark.parametrize(
    "clip_mode, inside",
    [
        # every token: (2 - 1 - 0.5 + 1 - 4) / 5 = -0.5
        ("none", [1, 1, 1, 1, 1]),
        # only rho in [0.8, 1.2]: t2 -> -0.5 / 5 = -0.1
        ("two-side", [0, 0, 1, 0, 0]),
        # A >= 0 needs rho <= 1.2 (t3, not t0), A <= 0 needs rho >= 0.8 (t2, t4, not t1)
        # (-0.5 + 1 - 4) / 5 = -0.7
        ("one-side", [0, 0, 1, 1, 1]),
        # two-side (t2), A >= 0 with rho <= 1 - 0.6 (t3), A <= 0 with rho >= 1 + 2 (none)
        # (-0.5 + 1) / 5 = 0.1
        ("ring", [0, 0, 1, 1, 0]),
    ],
)
def test_rec_clip_modes(clip_mode, inside):
    lp = [[-1.0] * 5]
    logprobs = leaf(lp)
    old = with_ratios(lp, REC_RATIOS)
    fn = build(POLICY_LOSS_FN, "rec", {"clip_mode": clip_mode})
    loss, metrics = fn(logprobs, torch.ones(1, 5), old_logprobs=old, advantages=t(REC_ADV))
    kept = [a * i for a, i in zip(REC_ADV[0], inside, strict=True)]
    close(loss, sum(kept) / 5)
    close(metrics["pg_clipfrac"], 1 - sum(inside) / 5)
    loss.backward()
    close(logprobs.grad, [[-k / 5 for k in kept]])


def test_rec_gspo_one_side_tests_the_sequence_ratio():
    # row 0: log-ratios 0.1, 0.3 -> s = exp(0.2) = 1.22 > 1.2 with A > 0: dropped
    # row 1: log-ratios 0.2, -0.2 -> s = 1 >= 0.8 with A < 0: kept, although token 0's
    # own ratio exp(0.2) = 1.22 is outside the range; l = -(-1) * -1 = -1 per token
    # token-mean over 4 tokens: -2 / 4
    logprobs = leaf([[-1.0, -1.0], [-1.0, -1.0]])
    old = t([[-1.1, -1.3], [-1.2, -0.8]])
    adv = t([[1.0, 1.0], [-1.0, -1.0]])
    fn = build(POLICY_LOSS_FN, "rec", {"clip_mode": "gspo-one-side"})
    loss, _ = fn(logprobs, torch.ones(2, 2), old_logprobs=old, advantages=adv)
    close(loss, -0.5)
    loss.backward()
    close(logprobs.grad, [[0.0, 0.0], [0.25, 0.25]])


@pytest.mark.parametrize(
    "args, loss_value, grad",
    [
        # rho 2, A 1: W = A * rho = 2 (no gradient through rho); l = -2 * -1 = 2
        ({"weight": "importance_sampling"}, 2.0, -2.0),
        # W = A * exp(A / temp) = exp(2) = 7.389056
        ({"weight": "advantage", "temp": 0.5}, 7.389056, -7.389056),
        # single-token sequence: s = rho = 2, as importance_sampling
        ({"weight": "gspo_importance_sampling"}, 2.0, -2.0),
        # none + k2: A * 1 + 0.5 * (ln 2)^2 = 1.240227; gradient -1 + 0.5 * 2 ln 2 = -0.306853
        ({"regularizer": "k2", "regularizer_coef": 0.5}, 1.240227, -0.306853),
        # none + forward-kl: 1 - 0.5 * -1 = 1.5; gradient -1 - 0.5
        ({"regularizer": "forward-kl", "regularizer_coef": 0.5}, 1.5, -1.5),
    ],
)
def test_rec_weights_and_regularizers(args, loss_value, grad):
    logprobs = leaf([[-1.0]])
    old = with_ratios([[-1.0]], [[2.0]])
    fn = build(POLICY_LOSS_FN, "rec", args)
    loss, _ = fn(logprobs, t([[1]]), old_logprobs=old, advantages=t([[1.0]]))
    close(loss, loss_value)
    loss.backward()
    close(logprobs.grad, [[grad]])


def test_rec_rejects_unknown_modes_naming_the_valid_ones():
    with pytest.raises(InvalidArgsError, match="clip_mode 'both'.*one-side, gspo-one-side"):
        build(POLICY_LOSS_FN, "rec", {"clip_mode": "both"})
    with pytest.raises(InvalidArgsError, match="weight.*importance_sampling"):
        build(POLICY_LOSS_FN, "rec", {"weight": "is"})


# ---------------------------------------------------------------- sapo


def test_sapo_soft_gate_by_hand():
    # f = sigmoid(tau (rho - 1)) * 4 / tau, a stop-gradient gate; l = -A * f * logprob
    # t0: rho 1, A 1, tau 1, lp -1:        f = 0.5 * 4 = 2;             l = 2
    # t1: rho 2, A -1, tau 1.05, lp -2:    f = sigmoid(1.05) * 4 / 1.05 = 2.822000;
    #                                      l = 2.822000 * -2 = -5.644000
    # t2: rho 0.5, A 2, tau 1, lp -0.5:    f = sigmoid(-0.5) * 4 = 1.510163;
    #                                      l = -2 * 1.510163 * -0.5 = 1.510163
    # token-mean: (2 - 5.644000 + 1.510163) / 3 = -2.133837 / 3 = -0.711279
    lp = [[-1.0, -2.0, -0.5, -3.0]]
    logprobs = leaf(lp)
    old = with_ratios(lp, [[1.0, 2.0, 0.5, 1.0]])
    adv = t([[1.0, -1.0, 2.0, 5.0]])
    mask = t([[1, 1, 1, 0]])
    loss, metrics = build(POLICY_LOSS_FN, "sapo")(logprobs, mask, old_logprobs=old, advantages=adv)
    close(loss, -0.711279)
    close(metrics["sapo_gate"], (2.0 + 2.822000 + 1.510163) / 3)
    loss.backward()
    # d l / d logprob = -A * f (the gate is not differentiated), / 3 tokens:
    # t0: -1 * 2 = -2 (twice PPO's -A on-policy); t1: 1 * 2.822000; t2: -2 * 1.510163
    close(logprobs.grad, [[-2.0 / 3, 2.822000 / 3, -3.020325 / 3, 0.0]])


def test_sapo_needs_tau_neg_at_least_tau_pos():
    with pytest.raises(InvalidArgsError, match="tau_neg must be >= tau_pos"):
        build(POLICY_LOSS_FN, "sapo", {"tau_pos": 2.0, "tau_neg": 1.0})


# ---------------------------------------------------------------- importance_sampling


def test_importance_sampling_has_no_clip():
    # ratios 1.5, 0.5, 1.1 and a masked token; A = 1, -1, 2
    # l = -A * rho = -1.5, 0.5, -2.2; token-mean -3.2 / 3
    lp = [[-1.0, -2.0, -0.5, -4.0]]
    logprobs = leaf(lp)
    old = with_ratios(lp, [[1.5, 0.5, 1.1, 1.0]])
    adv = t([[1.0, -1.0, 2.0, 5.0]])
    mask = t([[1, 1, 1, 0]])
    loss, metrics = build(POLICY_LOSS_FN, "importance_sampling")(
        logprobs, mask, old_logprobs=old, advantages=adv
    )
    close(loss, -3.2 / 3)
    close(metrics["ppo_kl"], -(LN(1.5) + LN(0.5) + LN(1.1)) / 3)
    loss.backward()
    # d(-A rho) / d logprob = -A rho, also for t0 whose ratio PPO would clip
    close(logprobs.grad, [[-1.5 / 3, 0.5 / 3, -2.2 / 3, 0.0]])


# ---------------------------------------------------------------- ppo options


def seq_mask_batch():
    # row 0: log-ratios -0.15, -0.25 (rho 0.860708, 0.778801), mean log(pi_old / pi) 0.2
    # row 1: log-ratios 0.05, -0.05 (rho 1.051271, 0.951229), mean 0
    lp = [[-1.0, -1.0], [-1.0, -1.0]]
    old = t([[-0.85, -0.75], [-1.05, -0.95]])
    adv = t([[-1.0, 1.0], [-1.0, -1.0]])
    return leaf(lp), old, adv, torch.ones(2, 2)


def test_ppo_sequence_masking_drops_negative_tokens_of_drifted_sequences():
    logprobs, old, adv, mask = seq_mask_batch()
    fn = build(POLICY_LOSS_FN, "ppo", {"enable_sequence_masking": True})
    loss, metrics = fn(logprobs, mask, old_logprobs=old, advantages=adv)
    # row 0 drifted (0.2 > 0.1): its A < 0 token t00 is dropped, t01 (A > 0) stays
    # all ratios are in [0.8, 1.2] or on PPO's unclipped side, so l = -A * rho:
    # t01 -0.778801, t10 1.051271, t11 0.951229; sum 1.223700, / 4 tokens = 0.305925
    close(loss, 0.305925)
    close(metrics["seq_mask_frac"], 0.25)
    close(metrics["seq_mask_kl"], 0.1)  # mean(0.2, 0)
    loss.backward()
    close(logprobs.grad, [[0.0, -0.778801 / 4], [1.051271 / 4, 0.951229 / 4]])


def test_ppo_sequence_masking_off_or_below_delta_changes_nothing():
    # without masking t00 adds 0.860708: (0.860708 + 1.223700) / 4 = 0.521102
    for args in ({}, {"enable_sequence_masking": True, "delta_sequence_masking": 0.25}):
        logprobs, old, adv, mask = seq_mask_batch()
        loss, metrics = build(POLICY_LOSS_FN, "ppo", args)(
            logprobs, mask, old_logprobs=old, advantages=adv
        )
        close(loss, 0.521102)
        loss.backward()
        close(logprobs.grad[0, 0], 0.860708 / 4)
    assert (
        "seq_mask_frac"
        not in build(POLICY_LOSS_FN, "ppo")(logprobs, mask, old_logprobs=old, advantages=adv)[1]
    )


def test_ppo_fallback_to_policy_gradient_ignores_old_logprobs():
    # old log-probs far away (ratios e^4, e^-2, 1) are ignored: rho = 1 everywhere
    # l = -A = -1, 1, -2; token-mean -2 / 3; REINFORCE gradient -A / 3
    logprobs = leaf([[-1.0, -2.0, -0.5]])
    old = t([[-5.0, 0.0, -0.5]])
    adv = t([[1.0, -1.0, 2.0]])
    fn = build(POLICY_LOSS_FN, "ppo", {"fallback_to_policy_gradient": True})
    loss, metrics = fn(logprobs, torch.ones(1, 3), old_logprobs=old, advantages=adv)
    close(loss, -2.0 / 3)
    assert metrics["ppo_kl"] == 0.0
    assert metrics["pg_clipfrac"] == 0.0
    loss.backward()
    close(logprobs.grad, [[-1.0 / 3, 1.0 / 3, -2.0 / 3]])


# ---------------------------------------------------------------- shared contract

RL_LOSSES = ["topr", "cispo", "sppo", "rec", "sapo", "importance_sampling", "mix_chord"]


@pytest.mark.parametrize("name", RL_LOSSES)
def test_rl_losses_require_old_logprobs_and_advantages(name):
    fn = build(POLICY_LOSS_FN, name)
    with pytest.raises(MissingInputError, match="needs old_logprobs"):
        fn(leaf([[0.0]]), torch.ones(1, 1), advantages=t([[1.0]]), is_expert=torch.tensor([0]))
    with pytest.raises(MissingInputError, match="needs advantages"):
        fn(leaf([[0.0]]), torch.ones(1, 1), old_logprobs=t([[0.0]]), is_expert=torch.tensor([0]))


def test_inputs_declare_what_the_trainer_must_pass():
    for name in ("topr", "cispo", "sppo", "rec", "sapo", "importance_sampling"):
        assert POLICY_LOSS_FN.get(name).inputs == {"old_logprobs", "advantages"}
    assert POLICY_LOSS_FN.get("mix_chord").inputs == {
        "old_logprobs",
        "advantages",
        "is_expert",
        "global_step",
    }
    assert POLICY_LOSS_FN.get("sft_is").inputs == frozenset()
    assert POLICY_LOSS_FN.get("sft_phi").inputs == frozenset()


@pytest.mark.parametrize(
    "name, typo, valid",
    [
        ("cispo", "clip_ratio", "clip_range_low, clip_range_high, enable_mask_clip"),
        ("topr", "threshold", "advantage_threshold, loss_agg_mode"),
        ("mix_chord", "mu", "mu_warmup_steps, mu_decay_steps, mu_peak, mu_valley"),
        ("ppo", "enable_seq_masking", "enable_sequence_masking, delta_sequence_masking"),
        ("sft_phi", "cutoff", "loss_agg_mode, cutoff_prob"),
        ("sapo", "tau", "tau_pos, tau_neg"),
        ("sppo", "eps", "epsilon"),
    ],
)
def test_a_wrong_argument_name_lists_the_valid_ones(name, typo, valid):
    with pytest.raises(InvalidArgsError, match=f"'{typo}'.*valid arguments: .*{valid}"):
        build(POLICY_LOSS_FN, name, {typo: 0.1})


@pytest.mark.parametrize(
    "name, args",
    [
        ("topr", {}),
        ("cispo", {"enable_mask_clip": True}),
        ("sppo", {}),
        ("rec", {"clip_mode": "one-side", "weight": "importance_sampling"}),
        ("sapo", {}),
        ("importance_sampling", {}),
        ("sft_is", {}),
        ("sft_phi", {}),
        ("ppo", {"enable_sequence_masking": True, "delta_sequence_masking": 0.0}),
    ],
)
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_add_up_to_the_batch(name, args, mode):
    """With the mini-batch normalizer, two micro-batches give the batch's loss and gradient."""
    gen = torch.Generator().manual_seed(0)
    logprobs = (-torch.rand(4, 5, generator=gen, dtype=torch.float64)).requires_grad_()
    old = logprobs.detach() + 0.3 * torch.randn(4, 5, generator=gen, dtype=torch.float64)
    adv = torch.randn(4, 1, generator=gen, dtype=torch.float64).expand(4, 5)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    fn = build(POLICY_LOSS_FN, name, {**args, "loss_agg_mode": mode})
    whole, _ = fn(logprobs, mask, old_logprobs=old, advantages=adv)
    (whole_grad,) = torch.autograd.grad(whole, logprobs)
    norm = LossNormalizer.from_mask(mask)
    parts = [
        fn(logprobs[r], mask[r], old_logprobs=old[r], advantages=adv[r], normalizer=norm)[0]
        for r in (slice(0, 1), slice(1, 4))
    ]
    (parts_grad,) = torch.autograd.grad(sum(parts), logprobs)
    torch.testing.assert_close(sum(parts), whole)
    torch.testing.assert_close(parts_grad, whole_grad)
