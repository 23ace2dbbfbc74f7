"""On-policy distillation: token advantages from a teacher's log-probs.

The student (the policy being trained) samples a response; a teacher model scores the
same tokens. With l^s_t = ``old_logprobs`` (the student that sampled) and l^t_t =
``teacher_logprobs``, per valid token:

``on_policy_distill`` (reverse KL; Agarwal et al., GKD, arXiv:2306.13649; Thinking
Machines' on-policy distillation, 2025):

    A_t = kl_coef * (l^t_t - l^s_t)

the negative of the per-token reverse-KL estimate log pi_s - log pi_t, so the policy
gradient lowers KL(pi_s || pi_t) on the student's own samples.

``jsd`` (generalised Jensen-Shannon divergence, GKD arXiv:2306.13649), with the mixture
m_t = beta p^t_t + (1 - beta) p^s_t of the sampled token's probabilities p = exp(l):

    JSD_t = beta p^t_t (l^t_t - log m_t) + (1 - beta) p^s_t (l^s_t - log m_t)
    A_t   = -kl_coef * JSD_t

beta = ``lambda_coef``; at beta = 0 or 1 the mixture equals one side and A_t = 0.
Returns = A for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trinity.algorithm.advantage.base import AdvantageFn, AdvantageInputs, require
from trinity.algorithm.registries import ADVANTAGE_FN


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

    @dataclass
    class Args:
        kl_coef: float = 1.0  # scale of the advantages

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        student, teacher = student_and_teacher(inputs, "on_policy_distill")
        advantages = self.args.kl_coef * (teacher - student) * inputs.mask
        return advantages, advantages.clone()


def token_jsd(student: torch.Tensor, teacher: torch.Tensor, beta: float) -> torch.Tensor:
    """Per-token generalised JSD of the sampled token's probabilities; 0 at beta 0 or 1."""
    if beta <= 0.0 or beta >= 1.0:
        return torch.zeros_like(student)
    log_mix = torch.logsumexp(
        torch.stack([student + math.log(1.0 - beta), teacher + math.log(beta)]), dim=0
    )
    to_teacher = teacher.exp() * (teacher - log_mix)
    to_student = student.exp() * (student - log_mix)
    return beta * to_teacher + (1.0 - beta) * to_student


@ADVANTAGE_FN.register("jsd")
class JSDAdvantage(AdvantageFn):
    """Minus the per-token Jensen-Shannon divergence between student and teacher."""

    @dataclass
    class Args:
        lambda_coef: float = 0.5  # beta: the teacher's weight in the mixture
        kl_coef: float = 1.0  # scale of the advantages

        def __post_init__(self) -> None:
            if not 0.0 <= self.lambda_coef <= 1.0:
                raise ValueError(f"lambda_coef must be in [0, 1], got {self.lambda_coef}")

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        student, teacher = student_and_teacher(inputs, "jsd")
        jsd = token_jsd(student, teacher, self.args.lambda_coef)
        advantages = -self.args.kl_coef * jsd * inputs.mask
        return advantages, advantages.clone()
