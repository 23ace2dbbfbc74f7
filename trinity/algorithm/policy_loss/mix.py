"""MIX: PPO on rollouts plus SFT on expert demonstrations in the same batch
(Trinity-RFT's ``mix`` algorithm; cf. CHORD, arXiv:2508.11408).

Rows flagged ``is_expert`` are demonstrations, the others are rollouts:

    loss = (1 - mu) * L_ppo(rollout rows) + mu * L_sft(expert rows)

Each part is averaged over its own rows of the whole mini-batch: ``normalizer`` counts
the rollout rows and ``expert_normalizer`` the expert rows, e.g.
``LossNormalizer.from_mask(mask[~is_expert])`` and ``LossNormalizer.from_mask(mask[is_expert])``.
A micro-batch without rows of one kind contributes 0 for that part.

Trinity-RFT's versions take the batch geometry (``ppo_mini_batch_size``,
``ppo_micro_batch_size_per_gpu``, ``ngpus_trainer``, ``train_batch_size_usual``,
``train_batch_size_expert``, ``use_dynamic_bsz``) to weight each micro-batch's parts so
that they average over their own rows of the mini-batch; the two normalizers give that
here, so those arguments are accepted and listed as derived in trinity/config/no_effect.py.
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.policy_loss.ppo import clipped_pg_loss
from trinity.algorithm.policy_loss.sft import nll_loss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.config.part_args.policy_loss import MixPolicyLossArgs


@POLICY_LOSS_FN.register("mix")
class MixPolicyLoss(PolicyLoss):
    """Weighted sum of a PPO loss on rollouts and an SFT loss on demonstrations."""

    Args = MixPolicyLossArgs

    inputs = frozenset({"old_logprobs", "advantages", "is_expert"})

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
        self.require(old_logprobs=old_logprobs, advantages=advantages, is_expert=is_expert)
        expert = is_expert.bool()
        rollout = ~expert
        pg_loss, metrics = clipped_pg_loss(
            logprobs[rollout],
            old_logprobs[rollout],
            advantages[rollout],
            action_mask[rollout],
            self.args,
            normalizer,
        )
        sft_loss = nll_loss(
            logprobs[expert], action_mask[expert], self.args.sft_loss_agg_mode, expert_normalizer
        )
        mu = self.args.mu
        loss = (1.0 - mu) * pg_loss + mu * sft_loss
        metrics.update(sft_loss=sft_loss.item(), mix_loss=loss.item())
        return loss, metrics
