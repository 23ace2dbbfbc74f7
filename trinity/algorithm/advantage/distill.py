"""On-policy distillation: token advantages from a teacher's log-probs.

The student (the policy being trained) samples a response; a teacher model scores the
same tokens. With l^s_t = ``old_logprobs`` (the student that sampled) and l^t_t =
``teacher_logprobs``, per valid token:

``on_policy_distill`` (reverse KL; Agarwal et al., GKD, arXiv:2306.13649; Thinking
Machines' on-policy distillation, 2025):

    A_t = kl_coef * (l^t_t - l^s_t)

the negative of the per-token reverse-KL estimate log pi_s - log pi_t, so the policy
gradient lowers KL(pi_s || pi_t) on the student's own samples.

``jsd`` (generalised Jensen-Shannon divergence, GKD arXiv:2306.13649) between teacher
and student at one position, with beta = ``lambda_coef`` and m = beta p^t + (1 - beta) p^s:

    JSD_beta = beta KL(p^t || m) + (1 - beta) KL(p^s || m)
             = sum_y beta p^t log p^t + (1 - beta) p^s log p^s - m log m

Its derivative in the student's probability of a token y is (1 - beta) log(p^s_y / m_y)
(the +1 terms cancel), so grad JSD_beta = E_{y ~ p^s}[(1 - beta) log(p^s_y / m_y)
grad log p^s_y]: the policy gradient with, on the sampled token,

    A_t = -kl_coef * (1 - beta) * (l^s_t - log m_t),  m_t = beta p^t_t + (1 - beta) p^s_t

lowers the JSD. It is on_policy_distill's advantage with the teacher replaced by the
mixture; A_t >= (1 - beta) log(1 - beta), and A_t > 0 where the teacher gives the token
more probability than the student. For small beta, A_t ~ beta (p^t_t / p^s_t - 1), the
forward-KL gradient; near beta = 1, ~ (1 - beta) (l^t_t - l^s_t), the reverse KL's. At
beta = 0 or 1 the mixture is one side, the divergence is 0 and so is A_t.
(Trinity-RFT's ``jsd`` uses -JSD's summand on the sampled token, beta p^t (l^t - log m)
+ (1 - beta) p^s (l^s - log m), which is not an estimate of the divergence nor of its
gradient and is near 0 whenever both probabilities are small.)
Returns = A for both.
"""

from __future__ import annotations

import math

import torch

from trinity.algorithm.advantage.base import AdvantageFn, AdvantageInputs, require
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.config.part_args.advantage import JSDAdvantageArgs, OnPolicyDistillAdvantageArgs


def student_and_teacher(inputs: AdvantageInputs, owner: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The (B, R) student and teacher log-probs, 0 on masked tokens (they may hold NaN)."""
    student = require(inputs.old_logprobs, "old_logprobs", owner, "the student's log-probs")
    teacher = require(
        inputs.teacher_logprobs, "teacher_logprobs", owner, "the teacher model's log-probs"
    )
    valid = inputs.action_mask.bool()
    return (
        torch.where(valid, student, torch.zeros_like(student)),
        torch.where(valid, teacher, torch.zeros_like(teacher)),
    )


@ADVANTAGE_FN.register("on_policy_distill")
class OnPolicyDistillAdvantage(AdvantageFn):
    """Teacher minus student log-prob on every valid token."""

    Args = OnPolicyDistillAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        student, teacher = student_and_teacher(inputs, "on_policy_distill")
        advantages = self.args.kl_coef * (teacher - student) * inputs.mask
        return advantages, advantages.clone()


def jsd_cost(student: torch.Tensor, teacher: torch.Tensor, beta: float) -> torch.Tensor:
    """(1 - beta) log(p^s / m) of the sampled tokens: d JSD_beta / d p^s (see the module
    docstring); 0 at beta 0 or 1, where the divergence is identically 0."""
    if beta <= 0.0 or beta >= 1.0:
        return torch.zeros_like(student)
    log_mix = torch.logsumexp(
        torch.stack([student + math.log(1.0 - beta), teacher + math.log(beta)]), dim=0
    )
    return (1.0 - beta) * (student - log_mix)


@ADVANTAGE_FN.register("jsd")
class JSDAdvantage(AdvantageFn):
    """Minus the generalised JSD's derivative in the student's sampled-token probability."""

    Args = JSDAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        student, teacher = student_and_teacher(inputs, "jsd")
        cost = jsd_cost(student, teacher, self.args.lambda_coef)
        advantages = -self.args.kl_coef * cost * inputs.mask
        return advantages, advantages.clone()
