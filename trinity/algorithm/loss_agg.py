"""Reducing a per-token loss matrix to the scalar that is back-propagated.

Modes (``loss_agg_mode``), for a loss matrix ``l`` (B, R) and mask ``m`` (B, R), where
the sums over sequences run over the sequences with at least one valid token (N of them):

- ``token-mean``:               sum_{i,t} m*l / sum_{i,t} m
- ``seq-mean-token-sum``:       (1/N) sum_i sum_t m*l
- ``seq-mean-token-mean``:      (1/N) sum_i (sum_t m*l / sum_t m)
- ``seq-mean-token-sum-norm``:  (1/N) sum_i sum_t m*l / L, with L a constant: the configured
  maximum response length (``model.max_response_tokens``) when given, else the padded
  width R of the tensor (the "Dr. GRPO" normalisation, arXiv:2503.20783).

Gradient accumulation
---------------------
Every denominator above is a count over the *whole mini-batch*. When the trainer splits a
mini-batch into micro-batches it must not average micro-batch means (that weights a short
micro-batch like a long one). Instead:

1. once per mini-batch: ``norm = LossNormalizer.from_mask(minibatch_mask, max_response_length)``
   (counts are additive: summing ``from_mask`` over the micro-batches gives the same result,
   and with data parallelism the trainer all-reduces (sums) ``tokens`` and ``seqs`` over ranks);
2. for each micro-batch: ``loss = aggregate_loss(l_mb, m_mb, mode, normalizer=norm)`` and
   ``loss.backward()`` with *no* further division by the number of micro-batches.

The micro-batch losses then add up to the mini-batch loss and the accumulated gradient is
the mini-batch gradient. Under DistributedDataParallel, which averages gradients over W
ranks, multiply each loss by W (the global counts already divide by the whole batch).
Without ``normalizer`` the counts of the given tensor are used (one micro-batch = the batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# the mode names live with the losses' Args, which validation checks without torch
from trinity.config.part_args.loss_agg_modes import (  # noqa: F401  (re-exported)
    LOSS_AGG_MODES,
    UnknownLossAggModeError,
    check_loss_agg_mode,
)


@dataclass(frozen=True)
class LossNormalizer:
    """Counts of a whole mini-batch that turn micro-batch sums into mini-batch means.

    Attributes:
        tokens: valid (mask = 1) tokens in the mini-batch.
        seqs: sequences with at least one valid token in the mini-batch.
        max_response_length: the constant L of ``seq-mean-token-sum-norm``; None means the
            padded width R of each tensor (only invariant if every micro-batch has one R).
    """

    tokens: float
    seqs: float
    max_response_length: float | None = None

    @classmethod
    def from_mask(
        cls, mask: torch.Tensor, max_response_length: float | None = None
    ) -> LossNormalizer:
        """Counts of ``mask`` (B, R)."""
        mask = mask.bool()
        return cls(
            tokens=float(mask.sum()),
            seqs=float(mask.any(dim=-1).sum()),
            max_response_length=max_response_length,
        )

    def __add__(self, other: LossNormalizer) -> LossNormalizer:
        if self.max_response_length != other.max_response_length:
            raise ValueError("cannot add LossNormalizers with different max_response_length")
        return LossNormalizer(
            self.tokens + other.tokens, self.seqs + other.seqs, self.max_response_length
        )

    def denominator(self, mode: str, width: int) -> float:
        """The divisor of the summed loss for ``mode``; ``width`` is the tensor's R."""
        check_loss_agg_mode(mode)
        if mode == "token-mean":
            count = self.tokens
        elif mode == "seq-mean-token-sum-norm":
            length = self.max_response_length if self.max_response_length else width
            count = self.seqs * length
        else:
            count = self.seqs
        # an all-masked batch has a zero loss, not a NaN one
        return max(count, 1.0)


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    normalizer: LossNormalizer | None = None,
) -> torch.Tensor:
    """Reduce ``loss_mat`` (B, R) over the valid tokens of ``mask`` (B, R) to a scalar.

    Args:
        loss_mat: per-token loss (B, R); values at masked positions are ignored (even NaN).
        mask: (B, R) bool or 0/1 float.
        mode: one of ``LOSS_AGG_MODES``.
        normalizer: counts of the whole mini-batch (see the module docstring); None uses
            the counts of ``mask``.
    """
    check_loss_agg_mode(mode)
    if loss_mat.shape != mask.shape:
        raise ValueError(f"loss_mat {tuple(loss_mat.shape)} and mask {tuple(mask.shape)} differ")
    if normalizer is None:
        normalizer = LossNormalizer.from_mask(mask)
    bool_mask = mask.bool()
    masked = torch.where(bool_mask, loss_mat, torch.zeros_like(loss_mat))
    if mode == "seq-mean-token-mean":
        per_seq = masked.sum(dim=-1) / bool_mask.sum(dim=-1).clamp(min=1)
        total = per_seq.sum()
    else:
        total = masked.sum()
    return total / normalizer.denominator(mode, loss_mat.shape[-1])
