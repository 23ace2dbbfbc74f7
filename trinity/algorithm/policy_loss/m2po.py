"""M2PO: second-moment trust policy optimisation (Zheng et al., "Prosperity before
Collapse: How Far Can Off-Policy RL Reach with Stale Data on LLMs?", arXiv:2510.01161).

Trains on stale rollouts without PPO's clip. The trust region is the second moment of
the log-ratio between the current policy and the one that sampled the tokens:

    lr_t  = logprobs_t - old_logprobs_t
    T     = valid tokens where PPO's clip could act: (A_t > 0, lr_t > 0) or (A_t < 0, lr_t < 0)
    M2    = mean of lr_t^2 over T

While M2 > tau (``m2_threshold``), the token of T with the largest lr_t^2 is masked
(m_t = 0) and M2 is taken again over the rest; every other valid token keeps m_t = 1.
The loss is then

    l_t = -A_t * m_t * exp(lr_t)

averaged over every valid token, the masked ones included (the paper's token-mean,
footnote 2), so ``loss_agg_mode`` is token-mean. ``lr_t`` is bounded to
+-``log_ratio_clip`` in the forward pass only; its gradient passes through unchanged.
The mask is a constant (no gradient).

The old log-probs must be those of the policy that sampled the tokens (the rollout
engine's: ``algorithm.bypass_old_logprobs`` true). The mask is taken over the tokens of
one call, a micro-batch: the paper's mini-batch when
``ppo_micro_batch_size_per_gpu`` holds the whole train batch.
"""

from __future__ import annotations

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.policy_loss.base import PolicyLoss
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.algorithm.utils import masked_mean
from trinity.config.part_args.policy_loss import M2POPolicyLossArgs


@torch.no_grad()
def m2po_mask(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    threshold: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(B, R) bool: the valid tokens M2PO keeps, and the statistics of the selection.

    Masking the largest squares one at a time until the mean is <= ``threshold`` keeps
    the k smallest squares, k the largest count whose mean is <= ``threshold``: the
    prefix means of the sorted squares give it in one pass.
    """
    valid = action_mask.bool()
    lr = log_ratio.detach().float()
    adv = advantages.detach()
    trust = valid & (((adv > 0) & (lr > 0)) | ((adv < 0) & (lr < 0)))
    index = trust.flatten().nonzero().flatten()
    squares = lr.square().flatten()[index]
    keep = valid.clone()
    m2_before = float(squares.mean()) if squares.numel() else 0.0
    kept = squares
    if squares.numel() and m2_before > threshold:
        ordered, order = torch.sort(squares, stable=True)
        counts = torch.arange(1, ordered.numel() + 1, dtype=ordered.dtype)
        means = ordered.cumsum(0) / counts.to(ordered.device)
        k = int((means <= threshold).sum())
        keep.view(-1)[index[order[k:]]] = False
        kept = ordered[:k]
    tokens = max(int(valid.sum()), 1)
    stats = {
        "m2_before": m2_before,
        "m2_after": float(kept.mean()) if kept.numel() else 0.0,
        "masked_fraction": (squares.numel() - kept.numel()) / tokens,
        "trust_region_fraction": squares.numel() / tokens,
    }
    return keep, stats


@POLICY_LOSS_FN.register("m2po")
class M2POPolicyLoss(PolicyLoss):
    """Unclipped importance-weighted policy gradient, masked to a second-moment bound."""

    Args = M2POPolicyLossArgs

    inputs = frozenset({"old_logprobs", "advantages"})

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
        self.require(old_logprobs=old_logprobs, advantages=advantages)
        args = self.args
        log_ratio = logprobs - old_logprobs
        keep, stats = m2po_mask(log_ratio, advantages, action_mask, args.m2_threshold)
        bound = args.log_ratio_clip
        # bounded forward value, unbounded gradient (straight through the clamp)
        bounded = log_ratio + (log_ratio.clamp(-bound, bound) - log_ratio).detach()
        ratio = torch.exp(bounded)
        losses = torch.where(keep, -advantages * ratio, torch.zeros_like(ratio))
        loss = aggregate_loss(losses, action_mask, args.loss_agg_mode, normalizer)
        metrics = {
            "pg_loss": loss.item(),
            "ppo_kl": masked_mean(-bounded.detach(), action_mask).item(),
            "ratio/mean": masked_mean(ratio.detach(), action_mask).item(),
            **{f"m2po/{name}": value for name, value in stats.items()},
        }
        return loss, metrics
