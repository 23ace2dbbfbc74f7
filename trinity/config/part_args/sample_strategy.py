"""``Args`` of the sample strategies (``algorithm.sample_strategy_args``).

The strategies themselves are in ``trinity.algorithm.sample_strategy``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DefaultSampleStrategyArgs:
    """``sample_strategy: default`` and ``warmup`` take no arguments."""


@dataclass
class StalenessControlSampleStrategyArgs:
    """Arguments of ``sample_strategy: staleness_control``."""

    max_staleness: int | None = None  # policy versions an experience may lag; None: any

    def __post_init__(self) -> None:
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {self.max_staleness}")


@dataclass
class StalenessLimitSampleStrategyArgs(StalenessControlSampleStrategyArgs):
    """Arguments of ``sample_strategy: staleness_limit``."""

    max_staleness: int | None = 1  # policy versions an experience may lag; None: any


@dataclass
class MixSampleStrategyArgs:
    """Arguments of ``sample_strategy: mix``."""

    expert_data_ratio: float = 0.5  # share of a train batch's rows that are expert rows
    sft_dataset_name: str = "sft_dataset"  # key of the expert data in auxiliary_buffers

    def __post_init__(self) -> None:
        # 1 would leave no room for rollouts in the batch
        if not 0 <= self.expert_data_ratio < 1:
            raise ValueError(f"expert_data_ratio must lie in [0, 1), got {self.expert_data_ratio}")
