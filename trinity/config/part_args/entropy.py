"""``Args`` of the entropy terms (``algorithm.entropy_loss_fn_args``).

The terms themselves are in ``trinity.algorithm.entropy``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EntropyLossArgs:
    """Arguments of ``entropy_loss_fn: default`` and ``mix``."""

    entropy_coef: float = 0.0  # weight of the entropy bonus


@dataclass
class NoEntropyLossArgs:
    """``entropy_loss_fn: none`` takes no arguments."""
