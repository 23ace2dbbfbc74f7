"""The policy-loss contract.

A policy loss is called once per micro-batch with response-aligned (B, R) tensors and
returns ``(loss, metrics)``: a differentiable scalar and floats for logging.

Every loss takes ``normalizer``: the ``LossNormalizer`` of the whole mini-batch (see
``trinity.algorithm.loss_agg``), so micro-batch losses add up to the mini-batch loss.
Loss-valued metrics (``pg_loss``, ``sft_loss``, ...) are this micro-batch's share and
add up the same way; ratio-valued metrics (``pg_clipfrac``, ``ppo_kl``, ...) are means
over this micro-batch's valid tokens.

``inputs`` lists the optional keyword inputs a loss reads, so the trainer knows what to
compute (e.g. reference log-probs only when some part needs them; ``global_step`` is
passed only to a loss that lists it); the loss raises ``MissingInputError`` if one of
them is not given.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from trinity.algorithm.advantage.base import MissingInputError
from trinity.algorithm.loss_agg import LossNormalizer
from trinity.config.part_args.policy_loss import PolicyLossArgs


class PolicyLoss(ABC):
    """Base of the registered policy losses; subclasses set ``Args`` and ``inputs``."""

    Args = PolicyLossArgs

    # keyword inputs of __call__ this loss reads (besides logprobs and action_mask)
    inputs: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, args: Any = None) -> None:
        self.args = args if args is not None else self.Args()

    @abstractmethod
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
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Compute the loss.

        Args:
            logprobs: (B, R) log pi_theta(a_t | s_t), differentiable.
            action_mask: (B, R) 1 where the token is trained on.
            old_logprobs: (B, R) log-probs of the policy that sampled the tokens.
            advantages: (B, R) from the advantage function.
            ref_logprobs: (B, R) log-probs of the frozen reference model.
            is_expert: (B,) bool, rows that are demonstrations rather than rollouts.
            normalizer: ``LossNormalizer`` of the mini-batch (of its rollout rows for mix).
            expert_normalizer: ``LossNormalizer`` of the mini-batch's expert rows (mix).
            global_step: the trainer's step count, 0 for the first update (mix_chord's
                schedule of mu).
            rollout_is_weights: (B, R) detached truncated importance weights of rollout
                correction, multiplying each token's loss (None when it is off; passed
                only to a loss that lists it, see trinity/algorithm/rollout_correction.py).
        """

    def require(self, **given: torch.Tensor | int | None) -> None:
        """Raise ``MissingInputError`` naming every required input that is None."""
        missing = [name for name, value in given.items() if value is None]
        if missing:
            raise MissingInputError(
                f"{type(self).__name__} needs {', '.join(missing)}; the trainer must pass "
                f"every name in {type(self).__name__}.inputs = {sorted(self.inputs)}"
            )
