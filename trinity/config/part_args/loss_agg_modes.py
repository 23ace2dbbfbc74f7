"""The names of ``loss_agg_mode``, which the losses' ``Args`` check.

The reductions themselves are in ``trinity.algorithm.loss_agg``.
"""

from __future__ import annotations

LOSS_AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


class UnknownLossAggModeError(ValueError):
    """``loss_agg_mode`` is not one of ``LOSS_AGG_MODES``."""


def check_loss_agg_mode(mode: str) -> str:
    """Return ``mode`` if it is a known aggregation mode, else raise naming the valid ones."""
    if mode not in LOSS_AGG_MODES:
        raise UnknownLossAggModeError(
            f"unknown loss_agg_mode {mode!r}; valid: {', '.join(LOSS_AGG_MODES)}"
        )
    return mode
