"""GiGPO: group-in-group policy optimisation for multi-step agents (Feng et al.,
arXiv:2505.10978).

Two critic-free advantages, added per step t of trajectory tau (see ``multi_step`` for how
rows, trajectories and groups relate):

    episode level:  A^E(tau) = (R(tau) - mean_g(R)) / F_norm,   R(tau) = sum_t r_t
    step level:     A^S(t)   = (G_t - mean_s(G)) / F_norm,      G_t = sum_{k >= t} gamma^(k-t) r_k
    A_t = A^E(tau) + omega * A^S(t)

mean_g runs over the trajectories of the task's group; mean_s over the anchor-state group
s: every step of the task's group that acted from the same environment state
(``AdvantageInputs.anchor_ids``), whichever trajectory it is in. F_norm = std + epsilon
(sample std) with ``fnorm: std``, 1 with ``fnorm: none`` (the paper's default, which
avoids the std's bias towards easy or hard tasks). A group of one trajectory has A^E = 0,
an anchor group of one step (or a step without an anchor, id < 0) has A^S = 0.

The immediate rewards r_t are ``step_rewards`` when given; otherwise the reward is sparse:
the last step's reward, and 0 for the earlier steps. A_t is spread over the step's valid
tokens; returns = A.
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage.base import (
    AdvantageFn,
    AdvantageInputs,
    broadcast,
    group_index,
    group_stats,
    require,
)
from trinity.algorithm.advantage.multi_step import Trajectories
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.config.part_args.advantage import GiGPOAdvantageArgs


def discounted_step_returns(
    rewards: torch.Tensor, trajs: Trajectories, gamma: float
) -> torch.Tensor:
    """(B,) G_t = r_t + gamma * G_{t+1} along each trajectory's steps."""
    returns = torch.zeros_like(rewards)
    following = rewards.new_zeros(trajs.length.numel())  # G of each trajectory's next step
    for step in range(int(trajs.length.max()) - 1, -1, -1):
        rows = (trajs.position == step).nonzero(as_tuple=True)[0]
        traj = trajs.index[rows]
        returns[rows] = rewards[rows] + gamma * following[traj]
        following[traj] = returns[rows]
    return returns


def normalised(
    values: torch.Tensor, group_ids: torch.Tensor, fnorm: str, epsilon: float
) -> torch.Tensor:
    """(values - group mean) / F_norm; 0 for a group of one."""
    stats = group_stats(values, group_ids)
    centred = values - stats.mean
    if fnorm == "std":
        centred = centred / (stats.std + epsilon)
    return torch.where(stats.size > 1, centred, torch.zeros_like(centred))


@ADVANTAGE_FN.register("gigpo")
class GiGPOAdvantage(AdvantageFn):
    """Episode-level group advantage plus anchor-state step-level advantage."""

    Args = GiGPOAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        args = self.args
        trajs = Trajectories.of(inputs, "gigpo")
        anchor_ids = require(
            inputs.anchor_ids, "anchor_ids", "gigpo", "an id of the state each step acted from"
        )
        if inputs.step_rewards is not None:
            rewards = inputs.step_rewards.to(inputs.token_level_rewards.dtype)
        else:
            is_last = trajs.position == trajs.length[trajs.index] - 1
            rewards = torch.where(is_last, inputs.scores(), 0.0)
        episode_returns = rewards.new_zeros(trajs.length.numel()).index_add(0, trajs.index, rewards)
        episode = normalised(episode_returns, trajs.group_ids, args.fnorm, args.epsilon)

        step = torch.zeros_like(rewards)
        anchored = anchor_ids >= 0
        if anchored.any():
            returns = discounted_step_returns(rewards, trajs, args.gamma)
            anchor_groups, _ = group_index(inputs.group_ids[anchored], anchor_ids[anchored])
            step[anchored] = normalised(returns[anchored], anchor_groups, args.fnorm, args.epsilon)
        per_row = episode[trajs.index] + args.omega * step
        advantages = broadcast(per_row, inputs.mask)
        return advantages, advantages.clone()
