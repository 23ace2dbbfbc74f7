"""GRPO: group-relative advantages (DeepSeekMath, arXiv:2402.03300).

Each task is rolled out several times; a response's advantage is its reward measured
against the other responses to the same task:

    A_i = (r_i - mean_g(r)) / (std_g(r) + epsilon)      std_normalize = true
    A_i =  r_i - mean_g(r)                              std_normalize = false (Dr. GRPO,
                                                        arXiv:2503.20783)

std_g is the sample standard deviation (N - 1). A group of one has no peer to compare
against and gets advantage 0. A_i is spread over the response's valid tokens; returns = A.

Options (all off by default):

- ``std_cal_level: batch`` divides by the sample std of every reward in the batch
  instead of the group's; the mean stays per group (arXiv:2508.08221).
- ``std_threshold: t`` gives advantage 0 to every group whose reward std is <= t, e.g.
  0 for groups that all succeeded or all failed (Polaris). The rows stay in the batch.
- ``rank_penalty: beta`` replaces each reward by r_i (1 - beta k_i / N), k_i the number
  of responses of the group that pi_old found less likely (mean token log-prob), so a
  correct but unlikely answer is pushed up more than a likely one ("Rewarding the
  Unlikely", arXiv:2506.02355). Needs ``old_logprobs``.

``grpo_verl`` is verl's form (``compute_grpo_outcome_advantage``): the same formula, but
a group of one has mean 0 and std 1, so it keeps its raw reward r / (1 + epsilon).
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage.base import (
    AdvantageFn,
    AdvantageInputs,
    broadcast,
    group_index,
    group_stats,
    rank_in_group,
    require,
    verl_group_stats,
)
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.algorithm.utils import masked_mean
from trinity.config.part_args.advantage import GRPOAdvantageArgs, GRPOVerlAdvantageArgs


def unlikeliness_rewards(
    scores: torch.Tensor, inputs: AdvantageInputs, rank_penalty: float, owner: str
) -> torch.Tensor:
    """(B,) r_i (1 - rank_penalty k_i / N): k_i counts the group's less likely responses."""
    old_logprobs = require(
        inputs.old_logprobs, "old_logprobs", owner, "rank_penalty ranks responses by pi_old"
    )
    likelihood = masked_mean(old_logprobs, inputs.action_mask, dim=-1)
    index, _ = group_index(inputs.group_ids)
    ranks = rank_in_group(likelihood, index).to(scores.dtype)
    sizes = torch.bincount(index).to(scores.dtype)[index]
    return scores * (1 - rank_penalty * ranks / sizes)


def batch_std(scores: torch.Tensor) -> torch.Tensor:
    """Sample std of every score in the batch; 1 for a batch of one."""
    if scores.numel() < 2:
        return scores.new_ones(())
    return scores.std()


@ADVANTAGE_FN.register("grpo")
class GRPOAdvantage(AdvantageFn):
    """Group-normalised outcome advantage."""

    Args = GRPOAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        args = self.args
        scores = inputs.scores()
        if args.rank_penalty is not None:
            scores = unlikeliness_rewards(scores, inputs, args.rank_penalty, "grpo")
        stats = group_stats(scores, inputs.group_ids)
        centred = scores - stats.mean
        if args.std_normalize:
            std = batch_std(scores) if args.std_cal_level == "batch" else stats.std
            centred = centred / (std + args.epsilon)
        keep = stats.size > 1
        if args.std_threshold is not None:
            keep = keep & (stats.std > args.std_threshold)
        per_row = torch.where(keep, centred, torch.zeros_like(centred))
        advantages = broadcast(per_row, inputs.mask)
        return advantages, advantages.clone()


@ADVANTAGE_FN.register("grpo_verl")
class GRPOVerlAdvantage(AdvantageFn):
    """GRPO as verl computes it: a group of one keeps its raw reward."""

    Args = GRPOVerlAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        advantages = broadcast(verl_grpo_scores(inputs, self.args.epsilon), inputs.mask)
        return advantages, advantages.clone()


def verl_grpo_scores(inputs: AdvantageInputs, epsilon: float) -> torch.Tensor:
    """(B,) (r - mean_g) / (std_g + epsilon) with verl's mean 0, std 1 for a group of one."""
    scores = inputs.scores()
    stats = verl_group_stats(scores, inputs.group_ids)
    return (scores - stats.mean) / (stats.std + epsilon)
