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

from dataclasses import dataclass

import torch

from trinity.algorithm.loss_agg import LossNormalizer, check_loss_agg_mode
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.policy_loss.ppo import ClipArgs, clipped_pg_loss
from trinity.algorithm.policy_loss.sft import nll_loss
from trinity.algorithm.registries import POLICY_LOSS_FN


@dataclass
class MixArgs(ClipArgs):
    """Arguments of ``mix`` and ``mix_chord`` besides their SFT weight.

    ``loss_agg_mode`` reduces both parts unless ``grpo_loss_agg_mode`` (rollout rows) or
    ``sft_loss_agg_mode`` (expert rows) is set. The batch-geometry fields are Trinity-RFT's
    (module docstring): checked, then derived here from the mini-batch's own rows.
    """

    sft_loss_agg_mode: str | None = None  # expert rows; None: loss_agg_mode
    grpo_loss_agg_mode: str | None = None  # rollout rows; None: loss_agg_mode
    use_dynamic_bsz: bool | None = None
    ppo_mini_batch_size: int = 1
    ppo_micro_batch_size_per_gpu: int = 1
    ngpus_trainer: int = 1
    train_batch_size_usual: int = 1
    train_batch_size_expert: int = 1

    def __post_init__(self) -> None:
        if self.sft_loss_agg_mode is None:
            self.sft_loss_agg_mode = self.loss_agg_mode
        if self.grpo_loss_agg_mode is not None:
            self.loss_agg_mode = self.grpo_loss_agg_mode  # clipped_pg_loss reads loss_agg_mode
        super().__post_init__()
        check_loss_agg_mode(self.sft_loss_agg_mode)
        for name in BATCH_GEOMETRY:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


# Trinity-RFT's arguments for the per-micro-batch weights the normalizers replace here
BATCH_GEOMETRY = (
    "ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu",
    "ngpus_trainer",
    "train_batch_size_usual",
    "train_batch_size_expert",
)


@POLICY_LOSS_FN.register("mix")
class MixPolicyLoss(PolicyLoss):
    """Weighted sum of a PPO loss on rollouts and an SFT loss on demonstrations."""

    @dataclass
    class Args(MixArgs):
        mu: float = 0.1  # weight of the SFT term

        def __post_init__(self) -> None:
            super().__post_init__()
            if not 0.0 <= self.mu <= 1.0:
                raise ValueError(f"mu must be in [0, 1], got {self.mu}")

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
