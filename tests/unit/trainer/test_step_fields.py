"""Multi-step rows: trajectory, step, anchor state and step reward reach the advantage
function through ``collate``."""

from __future__ import annotations

import pytest
import torch

from trinity.algorithm.advantage.base import AdvantageInputs
from trinity.algorithm.advantage.gigpo import GiGPOAdvantage
from trinity.trainer.batch import collate
from trinity.types import EID, Experience


def step(run: int, turn: int, reward: float, anchor: int | None = None) -> Experience:
    exp = Experience(
        tokens=torch.tensor([5, 6, 7]), prompt_length=2, reward=reward, eid=EID(1, 0, run, turn)
    )
    if anchor is not None:
        exp.info["anchor_id"] = anchor
    return exp


def test_collate_fills_the_step_fields() -> None:
    batch = collate([step(0, 0, 1.0, 11), step(0, 1, 1.0, 12), step(1, 0, 0.0)], 0)
    assert batch.trajectory_ids.tolist() == [0, 0, 1]
    assert batch.step_ids.tolist() == [0, 1, 0]
    assert batch.anchor_ids.tolist() == [11, 12, -1]
    assert batch.step_rewards is None  # no step sets one: a sparse reward
    batch = collate([step(0, 0, 1.0), step(0, 1, 1.0)], 0)
    assert batch.select(slice(1, 2)).step_ids.tolist() == [1]


def test_gigpo_over_collated_steps() -> None:
    # trajectory 0: steps from anchors 11, 12, reward 1; trajectory 1: one step from 11, 0
    # episode: R = (1, 0), mean 0.5 -> A^E = (+0.5, -0.5)
    # anchor 11: returns G = (1 (traj 0 step 0: sparse, gamma 1), 0) -> A^S = (+0.5, -0.5)
    # anchor 12: one step -> A^S = 0
    batch = collate([step(0, 0, 1.0, 11), step(0, 1, 1.0, 12), step(1, 0, 0.0, 11)], 0)
    rewards = torch.zeros(3, 1)
    rewards[:, 0] = batch.rewards
    advantages, _ = GiGPOAdvantage()(
        AdvantageInputs(
            token_level_rewards=rewards,
            action_mask=batch.action_mask,
            group_ids=batch.group_ids,
            trajectory_ids=batch.trajectory_ids,
            step_ids=batch.step_ids,
            anchor_ids=batch.anchor_ids,
            step_rewards=batch.step_rewards,
        )
    )
    assert advantages[:, 0].tolist() == pytest.approx([1.0, 0.5, -1.0])
