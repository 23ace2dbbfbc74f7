"""Supervised fine-tuning: the negative log-likelihood of the response tokens.

    l_t = -logprobs_t,   reduced with ``loss_agg_mode``

Used by ``algorithm_type: sft`` and, on expert rows, by ``mix``.
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.config.part_args.policy_loss import LossAggModeArgs


def nll_loss(
    logprobs: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str,
    normalizer: LossNormalizer | None,
) -> torch.Tensor:
    """Aggregated -logprobs over the valid tokens."""
    return aggregate_loss(-logprobs, action_mask, loss_agg_mode, normalizer)


@POLICY_LOSS_FN.register("sft")
class SFTLoss(PolicyLoss):
    """Negative log-likelihood."""

    Args = LossAggModeArgs

    inputs = frozenset()

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
        loss = nll_loss(logprobs, action_mask, self.args.loss_agg_mode, normalizer)
        return loss, {"sft_loss": loss.item()}
