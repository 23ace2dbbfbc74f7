"""From a collated batch's rewards to its advantages and returns.

    metrics = fill_advantages(batch, advantage_fn, kl_penalty)

Each sequence's reward sits on its last response token; with reference log-probs the
KL penalty is subtracted per token; the algorithm's advantage function then turns the
rollout rows into advantages and returns (expert rows, mix's demonstrations, keep 0).
"""

from __future__ import annotations

from typing import Any

import torch

from trinity.algorithm.advantage.base import AdvantageInputs
from trinity.trainer.batch import TrainBatch


def token_level_rewards(batch: TrainBatch) -> torch.Tensor:
    """(B, R) with each sequence's reward on its last valid response token."""
    mask = batch.action_mask
    rewards = torch.zeros_like(mask)
    positions = torch.arange(mask.shape[1]).expand_as(mask)
    last = torch.where(mask > 0, positions, torch.full_like(positions, -1)).max(dim=1).values
    has_token = last >= 0
    rows = torch.nonzero(has_token).squeeze(1)
    rewards[rows, last[has_token]] = batch.rewards[has_token].to(rewards.dtype)
    return rewards


def _rows_of(values: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor | None:
    """``values[rows]``, or None for a batch field that is not set."""
    return None if values is None else values[rows]


def fill_advantages(batch: TrainBatch, advantage_fn: Any, kl_penalty: Any) -> dict[str, float]:
    """Set ``batch.advantages`` and ``batch.returns`` (B, R); returns the KL penalty's
    metrics (``critic/...``)."""
    metrics: dict[str, float] = {}
    rewards = token_level_rewards(batch)
    if batch.ref_logprobs is not None:
        rewards, kl_metrics = kl_penalty.apply_penalty(
            rewards, batch.old_logprobs, batch.ref_logprobs, batch.action_mask
        )
        metrics.update({f"critic/{k}": v for k, v in kl_metrics.items()})
    # expert rows (mix) are demonstrations: they take no part in the advantage estimate
    rollout = ~batch.is_expert
    advantages, returns = advantage_fn(
        AdvantageInputs(
            token_level_rewards=rewards[rollout],
            action_mask=batch.action_mask[rollout],
            group_ids=batch.group_ids[rollout],
            values=None if batch.values is None else batch.values[rollout],
            old_logprobs=batch.old_logprobs[rollout],
            trajectory_ids=_rows_of(batch.trajectory_ids, rollout),
            step_ids=_rows_of(batch.step_ids, rollout),
            anchor_ids=_rows_of(batch.anchor_ids, rollout),
            step_rewards=_rows_of(batch.step_rewards, rollout),
            teacher_logprobs=_rows_of(batch.teacher_logprobs, rollout),
        )
    )
    batch.advantages = torch.zeros_like(rewards)
    batch.returns = torch.zeros_like(rewards)
    batch.advantages[rollout] = advantages
    batch.returns[rollout] = returns
    return metrics
