"""Multi-step rollouts, and step-wise GRPO over them.

In a multi-step (agentic) rollout every step of a trajectory is its own row: the model's
response at that step. ``AdvantageInputs.trajectory_ids`` says which rows are steps of
the same trajectory and ``step_ids`` orders them; a group (``group_ids``) is the set of
trajectories that ran the same task.

``step_wise_grpo`` (after rLLM; Trinity-RFT arXiv:2505.17826) normalises the reward of
each trajectory's last step r_tau within its group and gives it to every step:

    A_tau = (r_tau - mean_g(r)) / (std(r) + epsilon)      std_cal_level = group | batch
    A_tau =  r_tau - mean_g(r)                             std_cal_level = none

The mean is always the group's; the std is the group's or the batch's (sample std, N - 1,
over every trajectory of the batch). ``enable_step_norm`` divides A_tau by the number
of steps of the trajectory. A group of one trajectory, and with ``std_threshold: t``
every group whose std is <= t, gets advantage 0 (its rows stay in the batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trinity.algorithm.advantage.base import (
    AdvantageFn,
    AdvantageInputs,
    broadcast,
    group_index,
    group_stats,
    rank_in_group,
    require,
)
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.config.part_args.advantage import StepWiseGRPOAdvantageArgs


@dataclass
class Trajectories:
    """The trajectories of a batch of step rows; T trajectories, B rows."""

    index: torch.Tensor  # (B,) trajectory 0..T-1 of each row
    position: torch.Tensor  # (B,) 0-based step number of each row within its trajectory
    last_row: torch.Tensor  # (T,) row of each trajectory's last step
    length: torch.Tensor  # (T,) number of steps
    group_ids: torch.Tensor  # (T,) group (task) of each trajectory

    @classmethod
    def of(cls, inputs: AdvantageInputs, owner: str) -> Trajectories:
        trajectory_ids = require(
            inputs.trajectory_ids,
            "trajectory_ids",
            owner,
            "the trajectory (run) each step row belongs to",
        )
        index, count = group_index(inputs.group_ids, trajectory_ids)
        rows = torch.arange(index.numel(), device=index.device)
        order = rows if inputs.step_ids is None else inputs.step_ids.long()
        position = rank_in_group(order, index)
        length = torch.bincount(index, minlength=count)
        last_row = torch.empty_like(length)
        is_last = position == length[index] - 1
        last_row[index[is_last]] = rows[is_last]
        return cls(index, position, last_row, length, inputs.group_ids[last_row])


@ADVANTAGE_FN.register("step_wise_grpo")
class StepWiseGRPOAdvantage(AdvantageFn):
    """The last step's group-normalised reward, on every step of the trajectory."""

    Args = StepWiseGRPOAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        args = self.args
        trajs = Trajectories.of(inputs, "step_wise_grpo")
        rewards = inputs.scores()[trajs.last_row]  # (T,)
        stats = group_stats(rewards, trajs.group_ids)
        scores = rewards - stats.mean
        if args.std_cal_level == "group":
            scores = scores / (stats.std + args.epsilon)
        elif args.std_cal_level == "batch":
            std = rewards.std() if rewards.numel() > 1 else rewards.new_ones(())
            scores = scores / (std + args.epsilon)
        if args.enable_step_norm:
            scores = scores / trajs.length
        keep = stats.size > 1
        if args.std_threshold is not None:
            keep = keep & (stats.std > args.std_threshold)
        scores = torch.where(keep, scores, torch.zeros_like(scores))
        advantages = broadcast(scores[trajs.index], inputs.mask)
        return advantages, advantages.clone()
