"""The advantage-function contract and the group statistics several estimators share.

An advantage function maps a response-aligned batch to ``(advantages, returns)``, both
(B, R) and zero wherever ``action_mask`` is 0. It runs under ``torch.no_grad``: advantages
are targets, never differentiated.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from trinity.config.part_args.advantage import AdvantageFnArgs


class MissingInputError(ValueError):
    """An algorithm part was called without an input it needs (e.g. values for GAE)."""


@dataclass
class AdvantageInputs:
    """What the trainer hands an advantage function; every tensor is response-aligned.

    Attributes:
        token_level_rewards: (B, R) float; the scalar reward sits on the last valid
            response token, minus the per-token KL penalty when ``kl_penalty_fn`` is set.
        action_mask: (B, R) bool/0-1; 1 where the token is trained on.
        group_ids: (B,) int64; rows with the same id answer the same task in the same
            explore step and form one group.
        values: (B, R) critic values V(s_t), needed by GAE only.
        baseline_rewards: (B,) reward of the greedy rollout of each row's task (ReMax).
        old_logprobs: (B, R) log pi_old(a_t|s_t) of the policy that sampled the tokens
            (on_policy_distill, jsd, clipb, clipv, grpo's ``rank_penalty``).
        teacher_logprobs: (B, R) log pi_teacher(a_t|s_t) of the same tokens under the
            teacher model (on_policy_distill, jsd).
        old_entropies: (B, R) entropy H_t of pi_old's next-token distribution (clipb, clipv).
        old_discriminant_baselines: (B, R) sum_x pi_old(x)^2 (log pi_old(x) + H_t), the
            policy's expectation of the entropy discriminant p (log p + H) at each
            position (clipv).
        trajectory_ids: (B,) int64; in a multi-step rollout each step is one row, and rows
            with the same ``(group_ids, trajectory_ids)`` are the steps of one trajectory
            (step_wise_grpo, gigpo).
        step_ids: (B,) int64 order of the steps within a trajectory; None means the rows'
            order in the batch.
        anchor_ids: (B,) int64 id (e.g. a hash) of the environment state a step acted
            from; steps of one group with the same id share an anchor state; negative
            means none (gigpo).
        step_rewards: (B,) immediate reward of each step (gigpo); None means a sparse
            reward: the trajectory's last row's reward, 0 for its earlier steps.
    """

    token_level_rewards: torch.Tensor
    action_mask: torch.Tensor
    group_ids: torch.Tensor
    values: torch.Tensor | None = None
    baseline_rewards: torch.Tensor | None = None
    old_logprobs: torch.Tensor | None = None
    teacher_logprobs: torch.Tensor | None = None
    old_entropies: torch.Tensor | None = None
    old_discriminant_baselines: torch.Tensor | None = None
    trajectory_ids: torch.Tensor | None = None
    step_ids: torch.Tensor | None = None
    anchor_ids: torch.Tensor | None = None
    step_rewards: torch.Tensor | None = None

    @property
    def mask(self) -> torch.Tensor:
        """``action_mask`` as float, for multiplying."""
        return self.action_mask.to(self.token_level_rewards.dtype)

    def scores(self) -> torch.Tensor:
        """(B,) the sequence reward: the row sum of ``token_level_rewards``."""
        return self.token_level_rewards.sum(dim=-1)


class AdvantageFn(ABC):
    """Base of the registered advantage functions; subclasses set ``Args``."""

    Args = AdvantageFnArgs

    def __init__(self, args: Any = None) -> None:
        self.args = args if args is not None else self.Args()

    @abstractmethod
    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(advantages, returns)``, each (B, R)."""

    def __call__(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            return self.compute(inputs)


@dataclass
class GroupStats:
    """Per-row statistics of the row's group, each (B,)."""

    size: torch.Tensor  # number of rows in the group
    mean: torch.Tensor  # mean score of the group
    std: torch.Tensor  # sample standard deviation (N - 1); 0 for a group of one


def group_stats(scores: torch.Tensor, group_ids: torch.Tensor) -> GroupStats:
    """Mean, sample std and size of each row's group.

    Args:
        scores: (B,) float.
        group_ids: (B,) integer ids; equal ids form a group.
    """
    if scores.shape != group_ids.shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} and group_ids {tuple(group_ids.shape)} differ"
        )
    _, index = torch.unique(group_ids, return_inverse=True)
    num_groups = int(index.max()) + 1 if index.numel() else 0
    zeros = scores.new_zeros(num_groups)
    size = zeros.index_add(0, index, torch.ones_like(scores))
    mean = zeros.index_add(0, index, scores) / size
    squares = zeros.index_add(0, index, (scores - mean[index]) ** 2)
    std = torch.sqrt(squares / (size - 1).clamp(min=1))
    return GroupStats(size=size[index], mean=mean[index], std=std[index])


def verl_group_stats(scores: torch.Tensor, group_ids: torch.Tensor) -> GroupStats:
    """``group_stats`` with verl's convention for a group of one: mean 0 and std 1.

    verl's outcome advantages (``compute_grpo_outcome_advantage``) keep the raw reward of
    a response that has no peer, where our grouped functions give it 0; the ``*_verl``
    functions and clipb/clipv follow verl.
    """
    stats = group_stats(scores, group_ids)
    alone = stats.size < 2
    return GroupStats(
        size=stats.size,
        mean=torch.where(alone, torch.zeros_like(stats.mean), stats.mean),
        std=torch.where(alone, torch.ones_like(stats.std), stats.std),
    )


def group_index(*ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(B,) dense index 0..G-1 of each row's key (the tuple of ``ids``) and G."""
    key = torch.stack([i.long() for i in ids], dim=-1)
    _, index = torch.unique(key, dim=0, return_inverse=True)
    return index, int(index.max()) + 1 if index.numel() else 0


def rank_in_group(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(B,) int64 rank of each row's value inside its group: 0 for the smallest.

    Ties are broken by row order. ``index`` is a dense group index (``group_index``).
    """
    order = torch.argsort(values, stable=True)
    order = order[torch.argsort(index[order], stable=True)]  # by group, then by value
    counts = torch.bincount(index)
    starts = torch.cumsum(counts, 0) - counts
    ranks = torch.empty_like(index)
    ranks[order] = torch.arange(index.numel(), device=index.device) - starts[index[order]]
    return ranks


def require(value: torch.Tensor | None, name: str, owner: str, why: str) -> torch.Tensor:
    """``value``, or a MissingInputError naming the part and what supplies the input."""
    if value is None:
        raise MissingInputError(f"advantage_fn '{owner}' needs AdvantageInputs.{name}: {why}")
    return value


def broadcast(per_row: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Spread (B,) values over the valid tokens of ``mask`` (B, R)."""
    return per_row[:, None] * mask


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = sum_{k >= t, valid} gamma^(number of valid steps from t to k) r_k, (B, R).

    Masked positions (padding, or environment tokens inside a multi-turn response) are
    skipped: they neither add reward nor count as a step, and their return is 0.
    """
    returns = torch.zeros_like(rewards)
    running = rewards.new_zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        valid = mask[:, t]
        running = torch.where(valid > 0, rewards[:, t] + gamma * running, running)
        returns[:, t] = running * valid
    return returns
