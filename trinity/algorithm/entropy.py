"""Entropy bonus: ``entropy_loss_fn``.

Adding ``-entropy_coef * aggregated entropy`` to the actor loss rewards keeping the
token distribution spread out, which slows the collapse of exploration. The per-token
entropy comes from ``trinity.algorithm.utils.entropy_from_logits``.

``mix`` is ``default`` restricted to the rollout rows: rows flagged ``is_expert`` (the
demonstrations of ``mix`` / ``mix_chord``) take no part in the entropy bonus, as the
policy should imitate them, not spread out on them. The trainer already hands every
entropy loss the mask of the rollout rows, so there both agree; ``mix`` also drops the
``is_expert`` rows of the mask it is given.
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.registries import ENTROPY_LOSS_FN
from trinity.algorithm.utils import masked_mean
from trinity.config.part_args.entropy import EntropyLossArgs, NoEntropyLossArgs


@ENTROPY_LOSS_FN.register("default")
class EntropyLoss:
    """loss = -entropy_coef * aggregate(entropy)."""

    Args = EntropyLossArgs

    def __init__(self, args: Args | None = None) -> None:
        self.args = args if args is not None else self.Args()

    def __call__(
        self,
        entropy: torch.Tensor,
        action_mask: torch.Tensor,
        *,
        loss_agg_mode: str = "token-mean",
        normalizer: LossNormalizer | None = None,
        is_expert: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Args: entropy (B, R), action_mask (B, R); the trainer passes the policy loss's
        ``loss_agg_mode`` and mini-batch ``normalizer``; ``is_expert`` (B,) is read by
        ``mix`` only.

        Metrics: ``entropy`` (token mean over this micro-batch) and ``entropy_loss``.
        """
        aggregated = aggregate_loss(entropy, action_mask, loss_agg_mode, normalizer)
        loss = -self.args.entropy_coef * aggregated
        return loss, {
            "entropy": masked_mean(entropy.detach(), action_mask).item(),
            "entropy_loss": loss.item(),
        }


@ENTROPY_LOSS_FN.register("mix")
class MixEntropyLoss(EntropyLoss):
    """``default`` over the rows not flagged ``is_expert``."""

    def __call__(
        self,
        entropy: torch.Tensor,
        action_mask: torch.Tensor,
        *,
        loss_agg_mode: str = "token-mean",
        normalizer: LossNormalizer | None = None,
        is_expert: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if is_expert is not None:
            action_mask = action_mask * (~is_expert.bool()).to(action_mask.dtype)[:, None]
        return super().__call__(
            entropy, action_mask, loss_agg_mode=loss_agg_mode, normalizer=normalizer
        )


@ENTROPY_LOSS_FN.register("none")
class NoEntropyLoss:
    """No entropy term; still reports the mean entropy for monitoring."""

    Args = NoEntropyLossArgs

    def __init__(self, args: Args | None = None) -> None:
        self.args = args if args is not None else self.Args()

    def __call__(
        self,
        entropy: torch.Tensor,
        action_mask: torch.Tensor,
        *,
        loss_agg_mode: str = "token-mean",
        normalizer: LossNormalizer | None = None,
        is_expert: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        metrics = {"entropy": masked_mean(entropy.detach(), action_mask).item()}
        return entropy.new_zeros(()), metrics
