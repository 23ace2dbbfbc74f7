"""GAE advantages for PPO (Schulman et al., arXiv:1506.02438; PPO arXiv:1707.06347).

With critic values V_t, per-token rewards r_t and the next *valid* position t':

    delta_t = r_t + gamma * V_{t'} - V_t          (V after the last valid token is 0)
    A_t     = delta_t + gamma * lam * A_{t'}
    returns = A_t + V_t                           (the critic's regression target)

Masked positions are skipped (they neither bootstrap nor accumulate), so environment
tokens inside a multi-turn response are transparent. The advantages are then whitened
over every valid token of the batch: (A - mean) / sqrt(var + 1e-8).
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage.base import AdvantageFn, AdvantageInputs, MissingInputError
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.algorithm.utils import masked_whiten
from trinity.config.part_args.advantage import PPOAdvantageArgs


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over (B, R) tensors; returns (advantages, returns)."""
    advantages = torch.zeros_like(rewards)
    next_value = rewards.new_zeros(rewards.shape[0])
    next_adv = rewards.new_zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        valid = mask[:, t] > 0
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * next_adv
        next_adv = torch.where(valid, adv, next_adv)
        next_value = torch.where(valid, values[:, t], next_value)
        advantages[:, t] = torch.where(valid, adv, torch.zeros_like(adv))
    returns = (advantages + values) * mask
    return advantages, returns


@ADVANTAGE_FN.register("ppo")
class PPOAdvantage(AdvantageFn):
    """GAE with a learned critic, whitened over the batch."""

    Args = PPOAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        if inputs.values is None:
            raise MissingInputError(
                "advantage_fn 'ppo' (GAE) needs critic values: set model.critic_model_path"
            )
        mask = inputs.mask
        advantages, returns = gae(
            inputs.token_level_rewards, inputs.values, mask, self.args.gamma, self.args.lam
        )
        return masked_whiten(advantages, mask), returns
