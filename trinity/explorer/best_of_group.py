"""RAFT's selection (Dong et al., arXiv:2304.06767): train only on the best rollouts.

RAFT samples ``repeat_times`` responses per prompt, ranks them by reward and fine-tunes
on the best one with the SFT loss. Here every rollout whose reward equals its group's
maximum is kept (ties are all kept); the others stay in the step with an all-zero
``action_mask``, so the SFT loss ignores them while the train batch keeps its size
(``buffer.train_batch_size``). A group whose rollouts all score <= ``min_reward`` (0:
nothing was solved) has nothing worth imitating and is masked whole.

    rewards of one group: 0.2, 1.0, 1.0, 0.0  ->  trained on: rollouts 2 and 3
"""

from __future__ import annotations

import torch

from trinity.pipeline.groups import groups_of
from trinity.types import Experience


def keep_best_of_group(exps: list[Experience], min_reward: float = 0.0) -> int:
    """Zero the ``action_mask`` of every rollout that is not its group's best (in place);
    returns how many were masked."""
    masked = 0
    for members in groups_of(exps).values():
        best = max(float(m.reward or 0.0) for m in members)
        for exp in members:
            if best <= min_reward or float(exp.reward or 0.0) < best:
                exp.action_mask = torch.zeros_like(exp.action_mask, dtype=torch.bool)
                exp.info["raft_masked"] = True
                masked += 1
    return masked
