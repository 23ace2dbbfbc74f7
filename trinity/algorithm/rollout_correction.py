"""Rollout correction: truncated importance sampling (TIS) between the rollout engine and
the trainer (Yao et al., "Your efficient RL framework secretly brings you off-policy RL
training", 2025; veRL's ``algorithm.rollout_correction``).

The engine that sampled a response and the trainer score the same tokens with the same
weights slightly differently (kernels, precision, batching). With ``bypass_mode: false``
the trainer recomputes the old log-probs itself and uses them as PPO's old log-probs;
each token's loss is then multiplied by the detached weight

    token:     w_t = min(exp(old_logprobs_t - rollout_logprobs_t), threshold)
    sequence:  w_t = min(exp(sum_t' (old_logprobs_t' - rollout_logprobs_t')), threshold)

(one weight for every token of a sequence), which corrects the gradient for tokens the
trainer's policy would have sampled more or less often than the engine did, and the cap
bounds its variance. ``rollout_is_batch_normalize`` rescales the weights to mean 1 over
the batch's valid tokens (sequence level: over its sequences).
"""

from __future__ import annotations

import torch

from trinity.algorithm.utils import LOG_RATIO_CLAMP, clamped_log_ratio, masked_mean

ROLLOUT_IS_LEVELS = ("token", "sequence")


def rollout_is_weights(
    old_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    level: str = "token",
    threshold: float = 2.0,
    batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights (B, R), 0 on masked tokens, and their metrics.

    Args:
        old_logprobs: (B, R) log pi_old(a_t | s_t) recomputed by the trainer.
        rollout_logprobs: (B, R) log pi_rollout(a_t | s_t) reported by the rollout engine.
        action_mask: (B, R) 1 where the token is trained on.
        level: ``token`` or ``sequence`` (see the module docstring).
        threshold: the cap of the weights.
        batch_normalize: rescale the truncated weights to mean 1.

    Metrics (before ``rollout_corr/``): ``rollout_is_mean/std/min/max`` of the weights
    applied, ``rollout_is_ratio_fraction_high`` (share of tokens whose ratio exceeded the
    cap), ``rollout_is_eff_sample_size`` (``(sum w)^2 / (n sum w^2)``, 1 when all weights
    agree), ``kl`` (mean of ``rollout - old``) and ``k3_kl`` (mean of ``r - 1 - log r``,
    ``r = exp(rollout - old)``).
    """
    if level not in ROLLOUT_IS_LEVELS:
        raise ValueError(f"rollout_is must be one of {ROLLOUT_IS_LEVELS}, got {level!r}")
    mask = action_mask.bool()
    log_ratio = torch.where(mask, old_logprobs - rollout_logprobs, torch.zeros_like(old_logprobs))
    if level == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(log_ratio)
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    weights = ratio.clamp(max=threshold)
    # sequence level: one weight per sequence with a valid token, each counted once
    valid = mask if level == "token" else mask.any(dim=-1, keepdim=True)
    unit = weights if level == "token" else weights[:, :1]
    if batch_normalize:
        mean = unit[valid].mean() if bool(valid.any()) else torch.tensor(1.0)
        weights = weights / mean.clamp(min=1e-8)
        unit = weights if level == "token" else weights[:, :1]
    weights = torch.where(mask, weights, torch.zeros_like(weights)).detach()
    metrics = _metrics(unit[valid], (ratio > threshold)[mask], old_logprobs, rollout_logprobs, mask)
    return weights, metrics


def _metrics(
    applied: torch.Tensor,
    truncated: torch.Tensor,
    old_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
) -> dict[str, float]:
    if applied.numel() == 0:
        return {}
    diff, r = clamped_log_ratio(rollout_logprobs, old_logprobs)
    return {
        "rollout_is_mean": float(applied.mean()),
        "rollout_is_std": float(applied.std(unbiased=False)),
        "rollout_is_min": float(applied.min()),
        "rollout_is_max": float(applied.max()),
        "rollout_is_ratio_fraction_high": float(truncated.float().mean()),
        "rollout_is_eff_sample_size": float(
            applied.sum() ** 2 / (applied.numel() * (applied**2).sum()).clamp(min=1e-12)
        ),
        "kl": float(masked_mean(diff, mask)),
        "k3_kl": float(masked_mean(r - 1 - diff, mask)),
    }
