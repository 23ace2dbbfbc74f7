"""PPO clipped surrogate loss (Schulman et al., arXiv:1707.06347), with the asymmetric
clip of DAPO (arXiv:2503.14476) and the dual clip of Ye et al. (arXiv:1912.09729).

With ratio rho_t = exp(logprobs - old_logprobs) and advantage A_t:

    l_t = max(-A_t * rho_t, -A_t * clip(rho_t, 1 - clip_range_low, 1 + clip_range_high))
    if A_t < 0 and clip_ratio_c is set:  l_t = min(l_t, -A_t * clip_ratio_c)

The dual clip bounds the loss of a token whose ratio has exploded although its
advantage is negative. l is reduced with ``loss_agg_mode``. The log-ratio is clamped to
[-20, 20] before exponentiating so one stale token cannot overflow the batch.

Two options of the ``ppo`` loss (off by default):

- ``enable_sequence_masking`` (DeepSeek-V3.2, arXiv:2512.02556): a sequence whose mean
  log(pi_old / pi_theta) over its valid tokens exceeds ``delta_sequence_masking`` has its
  negative-advantage tokens dropped (l_t = 0 there); they are still counted by the
  aggregation. Positive-advantage tokens of the sequence keep their loss.
- ``fallback_to_policy_gradient``: rho_t is replaced by exp(logprobs - sg(logprobs)),
  which is 1 with the gradient of pi_theta / pi_theta, so l_t = -A_t with gradient
  -A_t * grad log pi: REINFORCE, ignoring the gap between the sampler's and the
  trainer's log-probs (``ppo_kl`` then reads 0).
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import clamped_log_ratio, masked_mean
from trinity.config.part_args.policy_loss import ClipArgs, PPOPolicyLossArgs


def clipped_pg_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    args: ClipArgs,
    normalizer: LossNormalizer | None,
    *,
    sequence_mask_delta: float | None = None,
    fallback_to_policy_gradient: bool = False,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The PPO loss of the module docstring; returns (loss, metrics).

    ``sequence_mask_delta``: the KL bound of sequence masking (None: off).
    ``rollout_is_weights``: (B, R) detached rollout-correction weights each token's loss
    is multiplied by (trinity/algorithm/rollout_correction.py; None: 1).
    """
    behaviour = logprobs.detach() if fallback_to_policy_gradient else old_logprobs
    log_ratio, ratio = clamped_log_ratio(logprobs, behaviour)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - args.clip_range_low, 1.0 + args.clip_range_high)
    losses = torch.maximum(unclipped, clipped)
    lower_clipped = torch.zeros_like(losses, dtype=torch.bool)
    if args.clip_ratio_c is not None:
        bound = -advantages * args.clip_ratio_c
        lower_clipped = (advantages < 0) & (losses > bound)
        losses = torch.where(lower_clipped, bound, losses)
    seq_metrics = {}
    if sequence_mask_delta is not None:
        with torch.no_grad():
            seq_kl = masked_mean(-log_ratio, action_mask, dim=-1)  # (B,)
            dropped = (advantages < 0) & (seq_kl > sequence_mask_delta)[:, None]
            seq_metrics = {
                "seq_mask_frac": masked_mean(dropped.float(), action_mask).item(),
                "seq_mask_kl": seq_kl[action_mask.bool().any(dim=-1)].mean().nan_to_num().item(),
            }
        losses = torch.where(dropped, torch.zeros_like(losses), losses)
    if rollout_is_weights is not None:
        losses = losses * rollout_is_weights
    loss = aggregate_loss(losses, action_mask, args.loss_agg_mode, normalizer)
    with torch.no_grad():
        metrics = {
            "pg_loss": loss.item(),
            "pg_clipfrac": masked_mean((clipped > unclipped).float(), action_mask).item(),
            "pg_clipfrac_lower": masked_mean(lower_clipped.float(), action_mask).item(),
            "ppo_kl": masked_mean(-log_ratio, action_mask).item(),
            **seq_metrics,
        }
    return loss, metrics


@POLICY_LOSS_FN.register("ppo")
class PPOPolicyLoss(PolicyLoss):
    """Clipped surrogate objective on rollout tokens."""

    Args = PPOPolicyLossArgs

    # rollout_is_weights is optional: None when rollout correction is off
    inputs = frozenset({"old_logprobs", "advantages", "rollout_is_weights"})

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
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        self.require(old_logprobs=old_logprobs, advantages=advantages)
        args = self.args
        return clipped_pg_loss(
            logprobs,
            old_logprobs,
            advantages,
            action_mask,
            args,
            normalizer,
            sequence_mask_delta=args.delta_sequence_masking
            if args.enable_sequence_masking
            else None,
            fallback_to_policy_gradient=args.fallback_to_policy_gradient,
            rollout_is_weights=rollout_is_weights,
        )
