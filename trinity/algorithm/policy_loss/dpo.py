"""DPO: direct preference optimisation (Rafailov et al., arXiv:2305.18290), with the
conservative label smoothing of cDPO.

Rows come in pairs: row 2k is the chosen response and row 2k+1 the rejected one for the
same prompt. With sequence log-ratios against the reference model

    h_c = sum_t (logprobs - ref_logprobs) over the chosen row's valid tokens, h_r likewise
    z   = beta * (h_c - h_r)
    l   = -(1 - label_smoothing) * log sigmoid(z) - label_smoothing * log sigmoid(-z)

the loss is the mean of l over the mini-batch's pairs: with a ``normalizer`` the sum over
this micro-batch's pairs is divided by ``normalizer.seqs / 2`` (micro-batches must keep
pairs together, i.e. have an even number of rows).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trinity.algorithm.loss_agg import LossNormalizer
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import masked_sum
from trinity.config.part_args.policy_loss import DPOLossArgs


@POLICY_LOSS_FN.register("dpo")
class DPOLoss(PolicyLoss):
    """Pairwise logistic loss on sequence log-ratios."""

    Args = DPOLossArgs

    inputs = frozenset({"ref_logprobs"})

    def __call__(
        self,
        logprobs: torch.Tensor,
        action_mask: torch.Tensor,
        *,
        old_logprobs: torch.Tensor | None = None,
        advantages: torch.Tensor | None = None,
        ref_logprobs: torch.Tensor | None = None,
        is_expert: torch.Tensor | None = None,
        normalizer: LossNormalizer | None = None,
        expert_normalizer: LossNormalizer | None = None,
        global_step: int | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        self.require(ref_logprobs=ref_logprobs)
        if logprobs.shape[0] % 2:
            raise ValueError(
                f"dpo expects chosen/rejected pairs (an even number of rows), got {logprobs.shape[0]}"
            )
        seq_log_ratio = masked_sum(logprobs - ref_logprobs, action_mask, dim=-1)
        chosen, rejected = seq_log_ratio[0::2], seq_log_ratio[1::2]
        logits = self.args.beta * (chosen - rejected)
        smoothing = self.args.label_smoothing
        losses = -(1 - smoothing) * F.logsigmoid(logits) - smoothing * F.logsigmoid(-logits)
        pairs = normalizer.seqs / 2 if normalizer is not None else losses.shape[0]
        loss = losses.sum() / max(pairs, 1.0)
        with torch.no_grad():
            chosen_reward = self.args.beta * chosen
            rejected_reward = self.args.beta * rejected
            metrics = {
                "dpo_loss": loss.item(),
                "chosen_reward": chosen_reward.mean().item(),
                "rejected_reward": rejected_reward.mean().item(),
                "accuracy": (chosen_reward > rejected_reward).float().mean().item(),
                "reward_margin": (chosen_reward - rejected_reward).mean().item(),
            }
        return loss, metrics
