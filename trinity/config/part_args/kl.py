"""``Args`` of the KL estimators (``algorithm.kl_penalty_fn_args``, ``kl_loss_fn_args``).

The estimators themselves are in ``trinity.algorithm.kl``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class KLFnArgs:
    """Arguments of every ``kl_fn`` (``kl_penalty_fn`` and ``kl_loss_fn``)."""

    kl_coef: float = 0.001  # weight of the KL term

    def __post_init__(self) -> None:
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")
