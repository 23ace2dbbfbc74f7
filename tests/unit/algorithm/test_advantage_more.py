"""The advantage functions beyond the core ones, against hand-computed numbers."""

import math

import pytest
import torch
from torch.testing import assert_close

from trinity.algorithm import ADVANTAGE_FN, AdvantageInputs, MissingInputError, build
from trinity.algorithm.advantage.entropy_clip import discriminant
from trinity.algorithm.args import InvalidArgsError

# rows 0-2 answer task 7 with rewards 1, 0, 0; row 3 is alone in group 9 (reward 0.5)
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)
GROUPS = torch.tensor([7, 7, 7, 9])
ROOT_HALF = 1 / math.sqrt(2)  # (1 - 0.5) / std(1, 0) with std = sqrt(0.5)


def outcome_inputs(rewards=(1.0, 0.0, 0.0, 0.5), mask=MASK, groups=GROUPS, **extra):
    """The scalar reward on each row's last valid token."""
    token_rewards = torch.zeros(mask.shape)
    last = mask.long().cumsum(-1).argmax(-1)
    token_rewards[torch.arange(mask.shape[0]), last] = torch.tensor(rewards)
    return AdvantageInputs(token_rewards, mask, groups, **extra)


def per_row(advantages: torch.Tensor) -> torch.Tensor:
    return advantages[:, 0]


def run(name, inputs, args=None):
    return build(ADVANTAGE_FN, name, args)(inputs)


# --- outcome advantages --------------------------------------------------------------


def test_reinforce_is_the_reward():
    adv, returns = run("reinforce", outcome_inputs())
    # no baseline: A = r on every valid token, a group of one included
    expected = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.5, 0.5, 0.0]])
    assert_close(adv, expected)
    assert_close(returns, adv)


def test_asymre_default_shift():
    adv, _ = run("asymre", outcome_inputs())
    # baseline = mean(1, 0, 0) - 0.1 = 0.23333: 1 - 0.23333 = 0.76667, 0 - 0.23333;
    # the group of one gets 0
    assert_close(per_row(adv), torch.tensor([0.766667, -0.233333, -0.233333, 0.0]))


def test_asymre_baseline_shift():
    adv, _ = run("asymre", outcome_inputs(), {"baseline_shift": 0.2})
    # baseline = 1/3 + 0.2 = 0.53333: 0.46667, -0.53333, -0.53333; group of one -> 0
    assert_close(per_row(adv), torch.tensor([0.466667, -0.533333, -0.533333, 0.0]))


def test_asymre_verl_keeps_a_lone_reward():
    adv, _ = run("asymre_verl", outcome_inputs())
    # group 7 as asymre; row 3 alone: baseline 0 (no shift) -> 0.5
    assert_close(per_row(adv), torch.tensor([0.766667, -0.233333, -0.233333, 0.5]))


def test_grpo_verl_keeps_a_lone_reward():
    adv, _ = run("grpo_verl", outcome_inputs())
    # (1 - 1/3) / sqrt(1/3) = 1.1547, -1/3 / sqrt(1/3) = -0.57735;
    # row 3 alone: mean 0, std 1 -> 0.5 / (1 + 1e-6)
    assert_close(per_row(adv), torch.tensor([1.154700, -0.577350, -0.577350, 0.5]))


def test_opmd_verl_mean_and_logavgexp():
    adv, _ = run("opmd_verl", outcome_inputs())
    # r - mean(1, 0, 0): 2/3, -1/3, -1/3; row 3 alone: baseline 0 -> 0.5
    assert_close(per_row(adv), torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.5]))
    adv, _ = run("opmd_verl", outcome_inputs(), {"opmd_baseline": "logavgexp", "tau": 1.0})
    # baseline log((e + 1 + 1) / 3) = 0.452832; row 3 alone keeps 0.5
    b = 0.452832
    assert_close(per_row(adv), torch.tensor([1 - b, -b, -b, 0.5]))


def test_grpo_batch_level_std():
    adv, _ = run("grpo", outcome_inputs(), {"std_cal_level": "batch"})
    # batch rewards 1, 0, 0, 0.5: mean 0.375, squares 0.390625 + 2 * 0.140625 + 0.015625
    # = 0.6875, / 3 -> std 0.478714; group mean stays 1/3:
    # (2/3) / 0.478714 = 1.392621, (-1/3) / 0.478714 = -0.696311; group of one -> 0
    assert_close(per_row(adv), torch.tensor([1.392621, -0.696311, -0.696311, 0.0]))


def test_grpo_std_threshold_zeroes_flat_groups():
    mask = torch.ones(4, 2, dtype=torch.bool)
    inputs = outcome_inputs((1.0, 0.0, 0.6, 0.4), mask, torch.tensor([0, 0, 1, 1]))
    adv, _ = run("grpo", inputs)
    # without a threshold both groups give +-0.5 / 0.7071 and +-0.1 / 0.1414 = +-0.7071
    assert_close(per_row(adv), torch.tensor([ROOT_HALF, -ROOT_HALF, ROOT_HALF, -ROOT_HALF]))
    adv, _ = run("grpo", inputs, {"std_threshold": 0.2})
    # group 1 has std 0.1414 <= 0.2 -> 0; group 0 (std 0.7071) unchanged
    assert_close(per_row(adv), torch.tensor([ROOT_HALF, -ROOT_HALF, 0.0, 0.0]))


def rank_inputs():
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]], dtype=torch.bool)
    # mean log-prob over valid tokens: row 0 -0.1 (most likely), row 1 -2.0 (least
    # likely; its masked 50.0 is ignored), row 2 -1.0
    old_logprobs = torch.tensor([[-0.1, -0.1], [-2.0, 50.0], [-0.5, -1.5]])
    return outcome_inputs((1.0, 1.0, 0.0), mask, torch.tensor([0, 0, 0]), old_logprobs=old_logprobs)


def test_grpo_rank_penalty():
    adv, _ = run("grpo", rank_inputs(), {"rank_penalty": 0.5})
    # ranks by likelihood (0 = least likely): row 1 -> 0, row 2 -> 1, row 0 -> 2; N = 3
    # r' = r (1 - 0.5 k / 3): row 0 1 * 2/3, row 1 1 * 1, row 2 0 * 5/6 = 0
    # mean 5/9; deviations 1/9, 4/9, -5/9; sample std sqrt((1 + 16 + 25) / 81 / 2) = 0.509175
    # -> 0.218218, 0.872872, -1.091089: the unlikely correct answer gains most
    assert_close(per_row(adv), torch.tensor([0.218218, 0.872872, -1.091089]))


def test_grpo_rank_penalty_needs_old_logprobs():
    inputs = outcome_inputs()
    with pytest.raises(MissingInputError, match="old_logprobs"):
        run("grpo", inputs, {"rank_penalty": 0.5})


def test_rec_mean_baseline_and_population_std():
    adv, returns = run("rec", outcome_inputs())
    # default: r - mean(1, 0, 0) = 2/3, -1/3, -1/3; group of one -> 0
    assert_close(per_row(adv), torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.0]))
    assert_close(returns, adv)
    adv, _ = run("rec", outcome_inputs(), {"std_normalize": True})
    # population std sqrt(((2/3)^2 + 2 (1/3)^2) / 3) = sqrt(2/9) = 0.471405
    # -> (2/3) / 0.471405 = 1.414214, (-1/3) / 0.471405 = -0.707107
    assert_close(per_row(adv), torch.tensor([1.414214, -0.707107, -0.707107, 0.0]))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_rec_drop_balance(seed):
    mask = torch.ones(7, 1, dtype=torch.bool)
    # group 0: 1, 0, 0, 0 (mean 0.25: one at or above, three below -> drop two at random)
    # group 1: 1, 1, 0 (mean 2/3: two above, one below -> nothing dropped)
    rewards = (1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0)
    inputs = outcome_inputs(rewards, mask, torch.tensor([0, 0, 0, 0, 1, 1, 1]))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        adv, _ = run("rec", inputs, {"drop": "balance", "std_normalize": True})
    group0 = per_row(adv)[:4]
    # kept 1 and one 0: mean 0.5, population std 0.5 -> +1 and -1; the dropped two -> 0
    assert group0[0].item() == pytest.approx(1.0, abs=1e-5)
    assert_close(group0[1:].sort().values, torch.tensor([-1.0, 0.0, 0.0]), atol=1e-5, rtol=0)
    # group 1 untouched: mean 2/3, population std sqrt(2/9) -> 0.707107, 0.707107, -1.414214
    assert_close(per_row(adv)[4:], torch.tensor([0.707107, 0.707107, -1.414214]))


# --- multi-step ----------------------------------------------------------------------


def step_inputs(step_ids=True, **extra):
    """Group 0: trajectory 0 (2 steps, final reward 1), trajectory 1 (3 steps, final 0);
    group 1: trajectory 0 alone (1 step, reward 1). Earlier steps carry 0.3, which only
    the last step's reward should override. The rows are out of step order."""
    # row:      0    1    2    3    4    5
    # traj:     0    0    1    1    1    0 (group 1)
    # step:     1    0    0    2    1    0
    rewards = (1.0, 0.3, 0.3, 0.0, 0.3, 1.0)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1], [1, 0], [1, 1]], dtype=torch.bool)
    return outcome_inputs(
        rewards,
        mask,
        torch.tensor([0, 0, 0, 0, 0, 1]),
        trajectory_ids=torch.tensor([0, 0, 1, 1, 1, 0]),
        step_ids=torch.tensor([1, 0, 0, 2, 1, 0]) if step_ids else None,
        **extra,
    )


def test_step_wise_grpo_broadcasts_the_last_step():
    adv, returns = run("step_wise_grpo", step_inputs())
    # last steps: traj 0 -> 1, traj 1 -> 0: mean 0.5, sample std 0.7071 -> +-0.7071 on
    # every step of each trajectory; group 1 has one trajectory -> 0
    a = ROOT_HALF
    assert_close(per_row(adv), torch.tensor([a, a, -a, -a, -a, 0.0]))
    assert_close(adv[1], torch.tensor([a, 0.0]))  # masked token stays 0
    assert_close(returns, adv)


def test_step_wise_grpo_step_order_defaults_to_rows():
    # without step_ids the last row of trajectory 0 is row 1 (0.3) and of trajectory 1
    # row 4 (0.3): equal rewards -> 0 everywhere
    adv, _ = run("step_wise_grpo", step_inputs(step_ids=False))
    assert_close(adv, torch.zeros_like(adv))


def test_step_wise_grpo_step_norm():
    adv, _ = run("step_wise_grpo", step_inputs(), {"enable_step_norm": True})
    # 0.7071 / 2 steps = 0.353553; -0.7071 / 3 steps = -0.235702
    b, c = ROOT_HALF / 2, -ROOT_HALF / 3
    assert_close(per_row(adv), torch.tensor([b, b, c, c, c, 0.0]))


@pytest.mark.parametrize(
    ("level", "value"),
    [
        ("none", 0.5),  # 1 - 0.5, 0 - 0.5
        # batch last-step rewards 1, 0, 1: mean 2/3, sample std sqrt((1/9 + 4/9 + 1/9) / 2)
        # = sqrt(1/3) = 0.57735 -> 0.5 / 0.57735 = 0.866025
        ("batch", 0.866025),
    ],
)
def test_step_wise_grpo_std_levels(level, value):
    adv, _ = run("step_wise_grpo", step_inputs(), {"std_cal_level": level})
    v = value
    assert_close(per_row(adv), torch.tensor([v, v, -v, -v, -v, 0.0]))


def test_step_wise_grpo_std_threshold():
    # group 0's last-step std is 0.7071
    adv, _ = run("step_wise_grpo", step_inputs(), {"std_threshold": 0.8})
    assert_close(adv, torch.zeros_like(adv))
    adv, _ = run("step_wise_grpo", step_inputs(), {"std_threshold": 0.7})
    assert per_row(adv)[0].item() == pytest.approx(ROOT_HALF, abs=1e-5)


def test_step_wise_grpo_needs_trajectory_ids():
    with pytest.raises(MissingInputError, match="trajectory_ids"):
        run("step_wise_grpo", outcome_inputs())


def gigpo_inputs(**extra):
    """Group 0: trajectory A (rows 0-1, final reward 1), trajectory B (rows 2-4, final
    reward 0.5); group 1: one step (row 5). Anchor states: A.s0 and B.s0 are state 10,
    A.s1 and B.s2 are state 20, B.s1 has none (-1); row 5 is state 10 of another task."""
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1], [1, 0], [1, 1]], dtype=torch.bool)
    return outcome_inputs(
        (0.0, 1.0, 0.0, 0.0, 0.5, 1.0),
        mask,
        torch.tensor([0, 0, 0, 0, 0, 1]),
        trajectory_ids=torch.tensor([0, 0, 1, 1, 1, 0]),
        anchor_ids=torch.tensor([10, 20, 10, -1, 20, 10]),
        **extra,
    )


def test_gigpo_sparse_reward():
    adv, returns = run("gigpo", gigpo_inputs(), {"gamma": 0.5})
    # episode: R_A = 1, R_B = 0.5, mean 0.75 -> A^E = +0.25 (A), -0.25 (B)
    # step returns, gamma 0.5: A (0.5, 1); B (0.125, 0.25, 0.5)
    # state 10: 0.5 vs 0.125, mean 0.3125 -> +-0.1875; state 20: 1 vs 0.5 -> +-0.25;
    # B.s1 has no anchor -> 0
    # A = A^E + A^S: 0.4375, 0.5 | -0.4375, -0.25, -0.5
    # row 5: one trajectory and the only state 10 of its task -> 0
    expected = torch.tensor([0.4375, 0.5, -0.4375, -0.25, -0.5, 0.0])
    assert_close(per_row(adv), expected)
    assert adv[1, 1].item() == 0.0 and adv[4, 1].item() == 0.0  # masked tokens
    assert_close(returns, adv)


def test_gigpo_std_norm_and_omega():
    adv, _ = run("gigpo", gigpo_inputs(), {"gamma": 0.5, "fnorm": "std", "omega": 0.5})
    # every group of two values normalises to +-0.7071 (std of two values = |a - b| / sqrt 2)
    # A.s0: 0.7071 + 0.5 * 0.7071 = 1.06066; B.s1: -0.7071 + 0
    a, b = 1.5 * ROOT_HALF, ROOT_HALF
    assert_close(per_row(adv), torch.tensor([a, a, -a, -b, -a, 0.0]))


def test_gigpo_dense_step_rewards():
    # the step rewards replace the rows' rewards: A (0.2, 1.0), B (0.0, 0.4, 0.1)
    step_rewards = torch.tensor([0.2, 1.0, 0.0, 0.4, 0.1, 1.0])
    adv, _ = run("gigpo", gigpo_inputs(step_rewards=step_rewards))
    # episode: R_A = 1.2, R_B = 0.5, mean 0.85 -> +-0.35
    # returns, gamma 1: A (1.2, 1.0), B (0.5, 0.5, 0.1)
    # state 10: 1.2 vs 0.5 -> +-0.35; state 20: 1.0 vs 0.1 -> +-0.45
    # A: 0.7, 0.8 | B: -0.7, -0.35 (no anchor), -0.8; row 5 -> 0
    assert_close(per_row(adv), torch.tensor([0.7, 0.8, -0.7, -0.35, -0.8, 0.0]))


def test_gigpo_needs_anchor_ids():
    inputs = step_inputs()
    with pytest.raises(MissingInputError, match="anchor_ids"):
        run("gigpo", inputs)


# --- distillation --------------------------------------------------------------------

DISTILL_MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)


def distill_inputs(student, teacher):
    return AdvantageInputs(
        token_level_rewards=torch.zeros(2, 3),
        action_mask=DISTILL_MASK,
        group_ids=torch.tensor([0, 1]),
        old_logprobs=torch.tensor(student),
        teacher_logprobs=torch.tensor(teacher),
    )


def test_on_policy_distill():
    inputs = distill_inputs(
        [[-1.0, -1.0, -0.5], [-0.2, -0.3, float("nan")]],
        [[-0.5, -1.0, -2.0], [-0.2, -0.1, float("nan")]],
    )
    adv, returns = run("on_policy_distill", inputs, {"kl_coef": 2.0})
    # 2 * (teacher - student): 2 * (0.5, 0, -1.5) = (1, 0, -3); 2 * (0, 0.2); masked -> 0
    assert_close(adv, torch.tensor([[1.0, 0.0, -3.0], [0.0, 0.4, 0.0]]))
    assert_close(returns, adv)


H, Q = math.log(0.5), math.log(0.25)


def test_jsd_symmetric():
    inputs = distill_inputs([[Q, H, Q], [H, Q, float("nan")]], [[H, H, H], [Q, Q, 0.0]])
    adv, _ = run("jsd", inputs)
    # A = -(1 - beta) ln(p_student / m), m = beta p_teacher + (1 - beta) p_student, beta 0.5
    # student 0.25, teacher 0.5: m = 0.375, A = -0.5 ln(0.25 / 0.375) = 0.202733
    # student 0.5, teacher 0.25: m = 0.375, A = -0.5 ln(0.5 / 0.375) = -0.143841
    # equal probabilities -> m = p -> 0; masked token -> 0
    up, down = 0.202733, -0.143841
    assert_close(adv, torch.tensor([[up, 0.0, up], [down, 0.0, 0.0]]))


def test_jsd_lambda_and_kl_coef():
    inputs = distill_inputs([[Q, Q, Q], [Q, Q, Q]], [[H, H, H], [H, H, H]])
    adv, _ = run("jsd", inputs, {"lambda_coef": 0.25, "kl_coef": 2.0})
    # m = 0.25 * 0.5 + 0.75 * 0.25 = 0.3125
    # A = -2 * 0.75 * ln(0.25 / 0.3125) = -1.5 * ln(0.8) = 0.334715 on the five valid tokens
    j = 0.334715
    assert_close(adv, torch.tensor([[j, j, j], [j, j, 0.0]]))
    for beta in (0.0, 1.0):  # the mixture is one side: no divergence
        adv, _ = run("jsd", inputs, {"lambda_coef": beta})
        assert_close(adv, torch.zeros_like(adv))


def generalised_jsd(log_student, log_teacher, beta):
    """beta KL(teacher || m) + (1 - beta) KL(student || m) over a whole distribution."""
    log_m = torch.logsumexp(
        torch.stack([log_teacher + math.log(beta), log_student + math.log(1 - beta)]), 0
    )
    to_teacher = (log_teacher.exp() * (log_teacher - log_m)).sum()
    to_student = (log_student.exp() * (log_student - log_m)).sum()
    return beta * to_teacher + (1 - beta) * to_student


@pytest.mark.parametrize("beta", [0.1, 0.5, 0.9])
def test_jsd_policy_gradient_is_minus_the_divergence_gradient(beta):
    # over a 3-token vocabulary, the exact expectation under the student of
    # A(y) grad log p_student(y) is the policy gradient the loss follows; it must point
    # down the generalised JSD: equal to -grad JSD in the student's logits
    logits = torch.tensor([0.3, -1.0, 1.2], dtype=torch.float64, requires_grad=True)
    log_teacher = torch.log_softmax(torch.tensor([1.0, 0.5, -0.7], dtype=torch.float64), 0)
    (grad_jsd,) = torch.autograd.grad(
        generalised_jsd(torch.log_softmax(logits, 0), log_teacher, beta), logits
    )
    log_student = torch.log_softmax(logits, 0)
    inputs = AdvantageInputs(
        token_level_rewards=torch.zeros(3, 1),
        action_mask=torch.ones(3, 1, dtype=torch.bool),
        group_ids=torch.arange(3),
        old_logprobs=log_student.detach()[:, None],
        teacher_logprobs=log_teacher[:, None],
    )
    adv, _ = run("jsd", inputs, {"lambda_coef": beta})
    surrogate = (log_student.detach().exp() * adv[:, 0] * log_student).sum()
    (policy_gradient,) = torch.autograd.grad(surrogate, logits)
    assert_close(policy_gradient, -grad_jsd)


@pytest.mark.parametrize("name", ["on_policy_distill", "jsd"])
@pytest.mark.parametrize("missing", ["old_logprobs", "teacher_logprobs"])
def test_distill_needs_both_logprobs(name, missing):
    inputs = distill_inputs([[H] * 3] * 2, [[H] * 3] * 2)
    setattr(inputs, missing, None)
    with pytest.raises(MissingInputError, match=missing):
        run(name, inputs)


# --- entropy clipping ----------------------------------------------------------------


def test_discriminant_by_hand():
    mask = torch.ones(1, 1, dtype=torch.bool)
    inputs = outcome_inputs(
        (0.0,),
        mask,
        torch.tensor([0]),
        old_logprobs=torch.tensor([[math.log(0.5)]]),
        old_entropies=torch.tensor([[1.0]]),
    )
    # S = p (log p + H) = 0.5 * (-0.693147 + 1) = 0.153426
    assert_close(discriminant(inputs, "clipb"), torch.tensor([[0.153426]]))


def clip_inputs(entropies=None, baselines=None):
    """Row 0 (reward 1) and row 1 (reward 0) of one group: GRPO gives +-0.7071. Log-probs
    are 0 (p = 1), so S_t = H_t; the fourth token is padding holding garbage."""
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool)
    return outcome_inputs(
        (1.0, 0.0),
        mask,
        torch.tensor([0, 0]),
        old_logprobs=torch.zeros(2, 4),
        old_entropies=torch.tensor(entropies) if entropies is not None else None,
        old_discriminant_baselines=torch.tensor(baselines) if baselines is not None else None,
    )


def test_clipb_clips_only_low_negative_tokens():
    inputs = clip_inputs([[-3.0, 0.0, 0.0, -99.0], [0.0, 0.0, -3.0, -99.0]])
    adv, _ = run("clipb", inputs, {"mu": 1.0})
    # S over the 6 valid tokens: -3, 0, 0, 0, 0, -3: mean -1, population var
    # (4 * 1 + 2 * 4) / 6 = 2 -> std 1.4142; both -3 tokens have S - mean = -2 < -1.4142,
    # but only row 1's advantage is negative: it is clipped to 0, row 0's is kept
    a = ROOT_HALF
    assert_close(adv, torch.tensor([[a, a, a, 0.0], [-a, -a, 0.0, 0.0]]))
    # the default mu 2.5 is beyond any z-score of 6 values (at most sqrt(5)): nothing clipped
    adv, _ = run("clipb", inputs)
    assert_close(adv, torch.tensor([[a, a, a, 0.0], [-a, -a, -a, 0.0]]))


def test_clipv_clips_the_most_violating_tokens():
    # H = 0 as well, so S = 0 and D = N - S = N
    inputs = clip_inputs(
        entropies=[[0.0] * 4] * 2, baselines=[[5.0, 0.0, 0.0, 99.0], [0.0, 4.0, 5.0, 99.0]]
    )
    # D over the valid tokens: 5, 0, 0, 0, 4, 5: population std 2.357 (mean 7/3); with
    # mu 1 row 1's D = 4 and D = 5 exceed it and have negative advantages (row 0's 5 is
    # positive: kept). 6 valid tokens * max_frac 1e-4 -> at most 1 token: the largest D
    a = ROOT_HALF
    adv, _ = run("clipv", inputs, {"mu": 1.0})
    assert_close(adv, torch.tensor([[a, a, a, 0.0], [-a, -a, 0.0, 0.0]]))
    # max_frac 0.5 -> up to 3 tokens: both are clipped
    adv, _ = run("clipv", inputs, {"mu": 1.0, "max_frac": 0.5})
    assert_close(adv, torch.tensor([[a, a, a, 0.0], [-a, 0.0, 0.0, 0.0]]))
    # the default mu 8.5: 4 and 5 are below 8.5 * 2.357, nothing clipped
    adv, _ = run("clipv", inputs)
    assert_close(adv, torch.tensor([[a, a, a, 0.0], [-a, -a, -a, 0.0]]))


def test_clip_inputs_are_required():
    with pytest.raises(MissingInputError, match="old_entropies"):
        run("clipb", clip_inputs())
    with pytest.raises(MissingInputError, match="old_discriminant_baselines"):
        run("clipv", clip_inputs(entropies=[[0.0] * 4] * 2))


# --- every new function --------------------------------------------------------------

NEW = [
    "reinforce",
    "asymre",
    "asymre_verl",
    "rec",
    "grpo_verl",
    "opmd_verl",
    "step_wise_grpo",
    "gigpo",
    "on_policy_distill",
    "jsd",
    "clipb",
    "clipv",
]


def full_inputs():
    """Every optional input, with NaN on the masked tokens of the per-token ones."""
    inputs = step_inputs(
        anchor_ids=torch.tensor([10, 20, 10, -1, 20, 10]),
        old_logprobs=torch.full((6, 2), -0.5),
        teacher_logprobs=torch.full((6, 2), -0.1),
        old_entropies=torch.full((6, 2), 0.7),
        old_discriminant_baselines=torch.full((6, 2), 0.2),
    )
    for name in ("old_logprobs", "teacher_logprobs", "old_entropies"):
        getattr(inputs, name)[~inputs.action_mask] = float("nan")
    inputs.old_discriminant_baselines[~inputs.action_mask] = float("nan")
    return inputs


@pytest.mark.parametrize("name", NEW)
def test_masked_tokens_get_zero(name):
    inputs = full_inputs()
    adv, returns = run(name, inputs)
    masked = ~inputs.action_mask
    assert masked.any()
    assert torch.all(adv[masked] == 0) and torch.all(returns[masked] == 0)
    assert torch.isfinite(adv).all()
    assert adv[inputs.action_mask].abs().sum() > 0  # not trivially all zero


@pytest.mark.parametrize(
    ("name", "args", "valid"),
    [
        ("gigpo", {"omgea": 1.0}, "omega, gamma, fnorm, epsilon"),
        ("grpo", {"std_threshhold": 0.0}, "std_threshold, rank_penalty, std_cal_level"),
        ("step_wise_grpo", {"step_norm": True}, "enable_step_norm, std_cal_level"),
        ("rec", {"dropping": "balance"}, "epsilon, std_normalize, drop"),
        ("jsd", {"beta": 0.5}, "lambda_coef, kl_coef"),
        ("clipv", {"max_fraction": 0.1}, "epsilon, mu, max_frac"),
        ("asymre_verl", {"shift": 0.1}, "baseline_shift"),
    ],
)
def test_wrong_argument_name_lists_the_valid_ones(name, args, valid):
    with pytest.raises(InvalidArgsError, match=f"{next(iter(args))}.*valid arguments: .*{valid}"):
        build(ADVANTAGE_FN, name, args)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("grpo", {"std_cal_level": "none"}),  # grpo's std is the group's or the batch's
        ("rec", {"drop": "all"}),
        ("gigpo", {"fnorm": "mean"}),
        ("jsd", {"lambda_coef": 1.5}),
        ("clipv", {"max_frac": 2.0}),
    ],
)
def test_invalid_argument_values(name, args):
    with pytest.raises(InvalidArgsError):
        build(ADVANTAGE_FN, name, args)
