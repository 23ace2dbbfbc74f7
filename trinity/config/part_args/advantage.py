"""``Args`` of the advantage functions (``algorithm.advantage_fn_args``).

The functions themselves are in ``trinity.algorithm.advantage``, one module per family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class AdvantageFnArgs:
    """No arguments: the default of an advantage function that declares none."""


@dataclass
class AsymREArgs:
    """Arguments of ``advantage_fn: asymre`` and ``asymre_verl``."""

    baseline_shift: float = -0.1  # added to the group mean to form the baseline


@dataclass
class ClipBAdvantageArgs:
    """Arguments of ``advantage_fn: clipb``."""

    epsilon: float = 1e-6  # added to the group std of GRPO
    mu: float = 2.5  # clip below mean(S) - mu * std(S)

    def __post_init__(self) -> None:
        if self.mu < 0:
            raise ValueError(f"mu must be >= 0, got {self.mu}")


@dataclass
class ClipVAdvantageArgs:
    """Arguments of ``advantage_fn: clipv``."""

    epsilon: float = 1e-6  # added to the group std of GRPO
    mu: float = 8.5  # clip where N - S > mu * std(N - S)
    max_frac: float = 1e-4  # at most this fraction of valid tokens (at least 1)

    def __post_init__(self) -> None:
        if self.mu < 0:
            raise ValueError(f"mu must be >= 0, got {self.mu}")
        if not 0.0 <= self.max_frac <= 1.0:
            raise ValueError(f"max_frac must be in [0, 1], got {self.max_frac}")


@dataclass
class GiGPOAdvantageArgs:
    """Arguments of ``advantage_fn: gigpo``."""

    omega: float = 1.0  # weight of the step-level advantage
    gamma: float = 1.0  # discount per step of the step-level returns
    fnorm: Literal["std", "none"] = "none"  # divide by the group's std, or by 1
    epsilon: float = 1e-6  # added to the std (fnorm: std)

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if self.fnorm not in ("std", "none"):
            raise ValueError(f"fnorm must be 'std' or 'none', got {self.fnorm!r}")
        if self.epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")


@dataclass
class GRPOAdvantageArgs:
    """Arguments of ``advantage_fn: grpo``."""

    std_normalize: bool = True  # divide by the group's standard deviation
    epsilon: float = 1e-6  # added to the std so identical rewards give 0, not NaN
    std_threshold: float | None = None  # groups with reward std <= this get 0
    rank_penalty: float | None = None  # scale rewards by 1 - beta * rank / N
    std_cal_level: Literal["group", "batch"] = "group"  # std of the group or batch

    def __post_init__(self) -> None:
        if self.epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")
        if self.rank_penalty is not None and self.rank_penalty < 0:
            raise ValueError(f"rank_penalty must be >= 0, got {self.rank_penalty}")
        if self.std_cal_level not in ("group", "batch"):
            raise ValueError(
                f"std_cal_level must be 'group' or 'batch', got {self.std_cal_level!r}"
            )


@dataclass
class GRPOVerlAdvantageArgs:
    """Arguments of ``advantage_fn: grpo_verl``."""

    epsilon: float = 1e-6  # added to the std so identical rewards give 0, not NaN

    def __post_init__(self) -> None:
        if self.epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")


@dataclass
class JSDAdvantageArgs:
    """Arguments of ``advantage_fn: jsd``."""

    lambda_coef: float = 0.5  # beta: the teacher's weight in the mixture
    kl_coef: float = 1.0  # scale of the advantages

    def __post_init__(self) -> None:
        if not 0.0 <= self.lambda_coef <= 1.0:
            raise ValueError(f"lambda_coef must be in [0, 1], got {self.lambda_coef}")


@dataclass
class OnPolicyDistillAdvantageArgs:
    """Arguments of ``advantage_fn: on_policy_distill``."""

    kl_coef: float = 1.0  # scale of the advantages


@dataclass
class OPMDArgs:
    """Arguments of ``advantage_fn: opmd`` and ``opmd_verl``."""

    opmd_baseline: Literal["mean", "logavgexp"] = "mean"
    tau: float = 1.0  # temperature of the logavgexp baseline

    def __post_init__(self) -> None:
        if self.opmd_baseline not in ("mean", "logavgexp"):
            raise ValueError(
                f"opmd_baseline must be 'mean' or 'logavgexp', got {self.opmd_baseline!r}"
            )
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")


@dataclass
class PPOAdvantageArgs:
    """Arguments of ``advantage_fn: ppo``."""

    gamma: float = 1.0  # discount per token
    lam: float = 1.0  # GAE lambda: 0 = one-step TD, 1 = Monte Carlo minus V

    def __post_init__(self) -> None:
        for name in ("gamma", "lam"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")


@dataclass
class RECAdvantageArgs:
    """Arguments of ``advantage_fn: rec``."""

    epsilon: float = 1e-6  # added to the std so identical rewards give 0, not NaN
    std_normalize: bool = False  # divide by the kept responses' population std
    drop: Literal["balance"] | None = None  # drop surplus below-mean responses

    def __post_init__(self) -> None:
        if self.epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")
        if self.drop not in (None, "balance"):
            raise ValueError(f"drop must be 'balance' or null, got {self.drop!r}")


@dataclass
class ReinforceAdvantageArgs:
    """``advantage_fn: reinforce`` takes no arguments."""


@dataclass
class ReinforcePlusPlusAdvantageArgs:
    """Arguments of ``advantage_fn: reinforceplusplus``."""

    gamma: float = 1.0  # discount per token

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")


@dataclass
class ReMaxAdvantageArgs:
    """``advantage_fn: remax`` takes no arguments."""


@dataclass
class RLOOAdvantageArgs:
    """``advantage_fn: rloo`` takes no arguments."""


@dataclass
class StepWiseGRPOAdvantageArgs:
    """Arguments of ``advantage_fn: step_wise_grpo``."""

    epsilon: float = 1e-6  # added to the std so identical rewards give 0, not NaN
    enable_step_norm: bool = False  # divide by the trajectory's number of steps
    std_cal_level: Literal["group", "batch", "none"] = "group"  # std of group/batch/none
    std_threshold: float | None = None  # groups with reward std <= this get 0

    def __post_init__(self) -> None:
        if self.epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")
        if self.std_cal_level not in ("group", "batch", "none"):
            raise ValueError(
                f"std_cal_level must be 'group', 'batch' or 'none', got {self.std_cal_level!r}"
            )
