"""REINFORCE++ advantages (Hu, arXiv:2501.03262).

No critic and no groups: each token's advantage is its discounted return

    G_t = r_t + gamma * G_{t+1}         (over valid tokens; see ``discounted_returns``)

whitened over every valid token of the batch, (G - mean) / sqrt(var + 1e-8). Returns
are the unwhitened G_t. A per-token KL penalty in the rewards (``kl_penalty_fn``) is
what makes this differ from plain REINFORCE.
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage.base import AdvantageFn, AdvantageInputs, discounted_returns
from trinity.algorithm.registries import ADVANTAGE_FN
from trinity.algorithm.utils import masked_whiten
from trinity.config.part_args.advantage import ReinforcePlusPlusAdvantageArgs


@ADVANTAGE_FN.register("reinforceplusplus")
class ReinforcePlusPlusAdvantage(AdvantageFn):
    """Batch-whitened discounted returns."""

    Args = ReinforcePlusPlusAdvantageArgs

    def compute(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        mask = inputs.mask
        returns = discounted_returns(inputs.token_level_rewards, mask, self.args.gamma)
        return masked_whiten(returns, mask), returns
