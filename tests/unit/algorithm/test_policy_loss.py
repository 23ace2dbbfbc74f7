"""Policy losses against hand-computed numbers."""

import math

import pytest
import torch

from trinity.algorithm import POLICY_LOSS_FN, LossNormalizer, MissingInputError, build

LN = math.log


def leaf(values):
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def test_ppo_clip_by_hand():
    # ratios 1.5, 0.5, 1.1 and a masked token; advantages 1, -1, 2
    # t0: max(-1.5, -1.2) = -1.2 (clipped); t1: max(0.5, 0.8) = 0.8 (clipped); t2: -2.2
    logprobs = leaf([[LN(1.5), LN(0.5), LN(1.1), 0.0]])
    old = t([[0.0, 0.0, 0.0, -5.0]])
    adv = t([[1.0, -1.0, 2.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    loss, metrics = build(POLICY_LOSS_FN, "ppo")(logprobs, mask, old_logprobs=old, advantages=adv)
    assert loss.item() == pytest.approx((-1.2 + 0.8 - 2.2) / 3)
    assert metrics["pg_loss"] == pytest.approx(-2.6 / 3)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 3)
    assert metrics["pg_clipfrac_lower"] == 0.0
    # ppo_kl = mean(old - new) = -(ln 1.5 + ln 0.5 + ln 1.1) / 3
    assert metrics["ppo_kl"] == pytest.approx(0.064124, abs=1e-6)
    loss.backward()
    # only t2 is unclipped: d/dlogprob (-A * ratio) / 3 = -2 * 1.1 / 3
    assert logprobs.grad.tolist() == [pytest.approx([0.0, 0.0, -2.2 / 3, 0.0])]


def test_ppo_asymmetric_clip():
    # ratio 1.5, A = 1: clipped at 1 + 0.28 -> -1.28
    fn = build(POLICY_LOSS_FN, "ppo", {"clip_range_low": 0.2, "clip_range_high": 0.28})
    loss, _ = fn(
        leaf([[LN(1.5)]]), torch.ones(1, 1), old_logprobs=t([[0.0]]), advantages=t([[1.0]])
    )
    assert loss.item() == pytest.approx(-1.28)


def test_ppo_dual_clip_bounds_negative_advantages():
    # ratio 4, A = -1: max(4, 1.2) = 4, dual clip min(4, 3 * 1) = 3
    logprobs = leaf([[LN(4.0)]])
    fn = build(POLICY_LOSS_FN, "ppo")
    loss, metrics = fn(logprobs, torch.ones(1, 1), old_logprobs=t([[0.0]]), advantages=t([[-1.0]]))
    assert loss.item() == pytest.approx(3.0)
    assert metrics["pg_clipfrac_lower"] == 1.0
    loss.backward()
    assert logprobs.grad.item() == 0.0
    # disabled: the loss is the unbounded 4
    fn = build(POLICY_LOSS_FN, "ppo", {"clip_ratio_c": None})
    loss, _ = fn(logprobs, torch.ones(1, 1), old_logprobs=t([[0.0]]), advantages=t([[-1.0]]))
    assert loss.item() == pytest.approx(4.0)


def test_ppo_requires_its_inputs():
    with pytest.raises(MissingInputError, match="old_logprobs"):
        build(POLICY_LOSS_FN, "ppo")(leaf([[0.0]]), torch.ones(1, 1), advantages=t([[1.0]]))


def test_opmd_loss():
    # -A * logprob = [1, -2, (masked)]; token-mean -0.5; / (1 + tau = 2) = -0.25
    logprobs = leaf([[-1.0, -2.0, -0.5]])
    loss, metrics = build(POLICY_LOSS_FN, "opmd")(
        logprobs, t([[1, 1, 0]]), advantages=t([[1.0, -1.0, 2.0]])
    )
    assert loss.item() == pytest.approx(-0.25)
    assert metrics["pg_loss"] == pytest.approx(-0.25)
    loss.backward()
    # d/dlogprob = -A / 2 tokens / 2
    assert logprobs.grad.tolist() == [pytest.approx([-0.25, 0.25, 0.0])]


def test_sft_loss():
    # rows: -(-1 - 2) and -(-4): token-mean 7/3, seq-mean-token-mean (1.5 + 4) / 2
    logprobs = leaf([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    loss, metrics = build(POLICY_LOSS_FN, "sft")(logprobs, mask)
    assert loss.item() == pytest.approx(7 / 3)
    assert metrics["sft_loss"] == pytest.approx(7 / 3)
    loss, _ = build(POLICY_LOSS_FN, "sft", {"loss_agg_mode": "seq-mean-token-mean"})(logprobs, mask)
    assert loss.item() == pytest.approx(2.75)


def dpo_batch():
    # pair 0: chosen log-ratio 1 + 1 = 2, rejected -1 (its second token masked);
    # pair 1: both log-ratios 0
    logprobs = leaf([[1.0, 1.0], [-1.0, 5.0], [0.0, 0.0], [0.0, 0.0]])
    ref = torch.zeros(4, 2, dtype=torch.float64)
    mask = t([[1, 1], [1, 0], [1, 1], [1, 1]])
    return logprobs, ref, mask


def test_dpo_loss():
    logprobs, ref, mask = dpo_batch()
    loss, metrics = build(POLICY_LOSS_FN, "dpo", {"beta": 0.1})(logprobs, mask, ref_logprobs=ref)
    # z = 0.1 * (2 - (-1)) = 0.3 -> -log sigmoid(0.3) = 0.554355; z = 0 -> log 2 = 0.693147
    assert loss.item() == pytest.approx((0.554355 + 0.693147) / 2, abs=1e-6)
    assert metrics["chosen_reward"] == pytest.approx((0.2 + 0.0) / 2)
    assert metrics["rejected_reward"] == pytest.approx((-0.1 + 0.0) / 2)
    assert metrics["accuracy"] == 0.5
    assert metrics["reward_margin"] == pytest.approx(0.15)
    loss.backward()
    # d loss / d chosen token = -beta * sigmoid(-0.3) / 2 pairs = -0.1 * 0.425557 / 2
    assert logprobs.grad[0, 0].item() == pytest.approx(-0.0212784, abs=1e-6)
    assert logprobs.grad[1, 1].item() == 0.0  # masked


def test_dpo_label_smoothing():
    logprobs, ref, mask = dpo_batch()
    fn = build(POLICY_LOSS_FN, "dpo", {"beta": 0.1, "label_smoothing": 0.1})
    loss, _ = fn(logprobs, mask, ref_logprobs=ref)
    # pair 0: 0.9 * 0.554355 + 0.1 * (-log sigmoid(-0.3) = 0.854355) = 0.584355; pair 1: log 2
    assert loss.item() == pytest.approx((0.584355 + 0.693147) / 2, abs=1e-6)


def test_dpo_micro_batches_of_pairs_add_up():
    logprobs, ref, mask = dpo_batch()
    fn = build(POLICY_LOSS_FN, "dpo")
    full, _ = fn(logprobs, mask, ref_logprobs=ref)
    norm = LossNormalizer.from_mask(mask)
    parts = [
        fn(logprobs[i : i + 2], mask[i : i + 2], ref_logprobs=ref[i : i + 2], normalizer=norm)
        for i in (0, 2)
    ]
    assert (parts[0][0] + parts[1][0]).item() == pytest.approx(full.item())


def mix_batch():
    # row 0 a rollout (ratio 1, A = 2), row 1 an expert demonstration
    logprobs = leaf([[-1.0, -1.0], [-1.0, -3.0]])
    old = t([[-1.0, -1.0], [0.0, 0.0]])
    adv = t([[2.0, 2.0], [0.0, 0.0]])
    mask = torch.ones(2, 2, dtype=torch.bool)
    is_expert = torch.tensor([False, True])
    return logprobs, old, adv, mask, is_expert


def test_mix_loss():
    logprobs, old, adv, mask, is_expert = mix_batch()
    fn = build(POLICY_LOSS_FN, "mix", {"mu": 0.25})
    loss, metrics = fn(logprobs, mask, old_logprobs=old, advantages=adv, is_expert=is_expert)
    # ppo on row 0: -A * 1 = -2; sft on row 1: (1 + 3) / 2 = 2; 0.75 * -2 + 0.25 * 2 = -1
    assert loss.item() == pytest.approx(-1.0)
    assert metrics["pg_loss"] == pytest.approx(-2.0)
    assert metrics["sft_loss"] == pytest.approx(2.0)
    loss.backward()
    # rollout tokens: 0.75 * -A * ratio / 2 = -0.75; expert tokens: 0.25 * -1 / 2 = -0.125
    assert logprobs.grad.tolist() == [[-0.75, -0.75], [-0.125, -0.125]]


def test_mix_micro_batches_with_one_kind_each_add_up():
    logprobs, old, adv, mask, is_expert = mix_batch()
    fn = build(POLICY_LOSS_FN, "mix", {"mu": 0.25})
    norm = LossNormalizer.from_mask(mask[~is_expert])
    expert_norm = LossNormalizer.from_mask(mask[is_expert])
    total = 0.0
    for row in (0, 1):  # each micro-batch holds only one kind of row
        rows = slice(row, row + 1)
        loss, _ = fn(
            logprobs[rows],
            mask[rows],
            old_logprobs=old[rows],
            advantages=adv[rows],
            is_expert=is_expert[rows],
            normalizer=norm,
            expert_normalizer=expert_norm,
        )
        total = total + loss
    assert total.item() == pytest.approx(-1.0)


def test_gspo_uses_the_sequence_ratio():
    # row 0: token log-ratios 0.1, 0.3 -> s = exp(0.2) = 1.221403, A = 1
    # row 1: s = 1, A = -1 -> loss 1 on each token
    logprobs = leaf([[0.1, 0.3], [-1.0, -2.0]])
    old = t([[0.0, 0.0], [-1.0, -2.0]])
    adv = t([[1.0, 1.0], [-1.0, -1.0]])
    mask = torch.ones(2, 2)
    loss, metrics = build(POLICY_LOSS_FN, "gspo")(logprobs, mask, old_logprobs=old, advantages=adv)
    # row 0 is clipped to 1 + 4e-4: seq-mean-token-mean = (-1.0004 + 1) / 2
    assert loss.item() == pytest.approx(-0.0002)
    assert metrics["pg_clipfrac"] == 0.5
    loss.backward()
    # row 0 clipped: no gradient; row 1: -A * s = 1 per token, / 2 tokens / 2 sequences
    assert logprobs.grad.tolist() == [[0.0, 0.0], [0.25, 0.25]]


def test_gspo_unclipped_tokens_carry_the_sequence_ratio():
    logprobs = leaf([[0.1, 0.3]])
    fn = build(POLICY_LOSS_FN, "gspo", {"clip_range": 1.0})
    loss, _ = fn(
        logprobs, torch.ones(1, 2), old_logprobs=t([[0.0, 0.0]]), advantages=t([[1.0, 1.0]])
    )
    # every token: -A * exp(0.2) = -1.221403
    assert loss.item() == pytest.approx(-1.221403, abs=1e-6)
    loss.backward()
    # each token's own gradient scaled by the sequence ratio: -1.221403 / 2 tokens
    assert logprobs.grad.tolist() == [pytest.approx([-0.610701, -0.610701], abs=1e-6)]


def test_inputs_declare_what_the_trainer_must_pass():
    assert POLICY_LOSS_FN.get("ppo").inputs == {"old_logprobs", "advantages", "rollout_is_weights"}
    assert POLICY_LOSS_FN.get("dpo").inputs == {"ref_logprobs"}
    assert POLICY_LOSS_FN.get("mix").inputs == {"old_logprobs", "advantages", "is_expert"}
    assert POLICY_LOSS_FN.get("sft").inputs == frozenset()
