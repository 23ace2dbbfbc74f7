"""OPMD policy loss (Trinity-RFT, arXiv:2505.17826).

Online policy mirror descent regularises each update towards the current policy with
strength tau; its surrogate is a REINFORCE-style loss scaled by 1 / (1 + tau):

    l_t = -A_t * logprobs_t / (1 + tau)

reduced with ``loss_agg_mode``. It uses no importance ratio, so it tolerates off-policy
data (large ``sync_interval``); pair it with ``advantage_fn: opmd``.
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.config.part_args.policy_loss import OPMDPolicyLossArgs


@POLICY_LOSS_FN.register("opmd")
class OPMDPolicyLoss(PolicyLoss):
    """Advantage-weighted log-likelihood, shrunk by 1 + tau."""

    Args = OPMDPolicyLossArgs

    inputs = frozenset({"advantages"})

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
        self.require(advantages=advantages)
        losses = -advantages * logprobs
        loss = aggregate_loss(losses, action_mask, self.args.loss_agg_mode, normalizer)
        loss = loss / (1.0 + self.args.tau)
        return loss, {"pg_loss": loss.item()}
