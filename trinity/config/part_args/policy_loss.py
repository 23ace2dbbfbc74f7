"""``Args`` of the policy losses (``algorithm.policy_loss_fn_args``).

The losses themselves are in ``trinity.algorithm.policy_loss``, one module per family;
``LossAggModeArgs``, ``ClipArgs`` and ``MixArgs`` serve several of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trinity.config.part_args.loss_agg_modes import check_loss_agg_mode

# Trinity-RFT's arguments for the per-micro-batch weights the normalizers replace in mix
BATCH_GEOMETRY = (
    "ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu",
    "ngpus_trainer",
    "train_batch_size_usual",
    "train_batch_size_expert",
)
# choices of the rec loss
CLIP_MODES = ("none", "one-side", "gspo-one-side", "two-side", "ring")
WEIGHTS = ("none", "importance_sampling", "gspo_importance_sampling", "advantage")
REGULARIZERS = ("none", "k2", "forward-kl")


def _check_choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")


@dataclass
class PolicyLossArgs:
    """No arguments: the default of a policy loss that declares none."""


@dataclass
class LossAggModeArgs:
    """Arguments of ``policy_loss_fn: sft``, ``sft_is`` and ``importance_sampling``."""

    loss_agg_mode: str = "token-mean"

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)


@dataclass
class ClipArgs:
    """The clipping arguments shared by the PPO-style losses."""

    clip_range: float = 0.2  # default for both sides
    clip_range_low: float | None = None  # epsilon below 1; None -> clip_range
    clip_range_high: float | None = None  # epsilon above 1; None -> clip_range
    clip_ratio_c: float | None = 3.0  # dual-clip bound for A < 0; None disables it
    loss_agg_mode: str = "token-mean"

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)
        if self.clip_range_low is None:
            self.clip_range_low = self.clip_range
        if self.clip_range_high is None:
            self.clip_range_high = self.clip_range
        if self.clip_range_low < 0 or self.clip_range_high < 0:
            raise ValueError("clip ranges must be >= 0")
        if self.clip_ratio_c is not None and self.clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 (or null), got {self.clip_ratio_c}")


@dataclass
class PPOPolicyLossArgs(ClipArgs):
    """Arguments of ``policy_loss_fn: ppo``."""

    enable_sequence_masking: bool = False  # drop A < 0 tokens of sequences that drifted
    delta_sequence_masking: float = 0.1  # mean log(pi_old / pi) above which they drop
    fallback_to_policy_gradient: bool = False  # rho := 1 with the gradient of log pi

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.delta_sequence_masking < 0:
            raise ValueError(
                f"delta_sequence_masking must be >= 0, got {self.delta_sequence_masking}"
            )


@dataclass
class MixArgs(ClipArgs):
    """Arguments of ``mix`` and ``mix_chord`` besides their SFT weight.

    ``loss_agg_mode`` reduces both parts unless ``grpo_loss_agg_mode`` (rollout rows) or
    ``sft_loss_agg_mode`` (expert rows) is set. The batch-geometry fields are Trinity-RFT's
    (see ``trinity.algorithm.policy_loss.mix``): checked, then derived there from the
    mini-batch's own rows.
    """

    sft_loss_agg_mode: str | None = None  # expert rows; None: loss_agg_mode
    grpo_loss_agg_mode: str | None = None  # rollout rows; None: loss_agg_mode
    use_dynamic_bsz: bool | None = None
    ppo_mini_batch_size: int = 1
    ppo_micro_batch_size_per_gpu: int = 1
    ngpus_trainer: int = 1
    train_batch_size_usual: int = 1
    train_batch_size_expert: int = 1

    def __post_init__(self) -> None:
        if self.sft_loss_agg_mode is None:
            self.sft_loss_agg_mode = self.loss_agg_mode
        if self.grpo_loss_agg_mode is not None:
            self.loss_agg_mode = self.grpo_loss_agg_mode  # clipped_pg_loss reads loss_agg_mode
        super().__post_init__()
        check_loss_agg_mode(self.sft_loss_agg_mode)
        for name in BATCH_GEOMETRY:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class MixPolicyLossArgs(MixArgs):
    """Arguments of ``policy_loss_fn: mix``."""

    mu: float = 0.1  # weight of the SFT term

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.mu <= 1.0:
            raise ValueError(f"mu must be in [0, 1], got {self.mu}")


@dataclass
class MixCHORDPolicyLossArgs(MixArgs):
    """Arguments of ``policy_loss_fn: mix_chord``."""

    mu_warmup_steps: int = 0  # steps of the linear rise of mu from 0 to mu_peak
    mu_decay_steps: int = 0  # steps of the cosine decay from mu_peak to mu_valley
    mu_peak: float = 0.1  # mu at the end of the warm-up
    mu_valley: float = 0.1  # mu after the decay
    enable_phi_function: bool = True  # expert rows: sft_phi loss (else plain sft)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("mu_warmup_steps", "mu_decay_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("mu_peak", "mu_valley"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")


@dataclass
class CISPOPolicyLossArgs:
    """Arguments of ``policy_loss_fn: cispo``."""

    clip_range_low: float = 1.0  # weight floor 1 - clip_range_low (1.0: no floor)
    clip_range_high: float = 0.28  # weight ceiling 1 + clip_range_high
    enable_mask_clip: bool = False  # also drop the tokens PPO's clip would drop
    mask_clip_range_low: float = 1.0  # A < 0 tokens below 1 - this are dropped
    mask_clip_range_high: float = 0.28  # A > 0 tokens above 1 + this are dropped
    loss_agg_mode: str = "token-mean"

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)
        for name in (
            "clip_range_low",
            "clip_range_high",
            "mask_clip_range_low",
            "mask_clip_range_high",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass
class DPOLossArgs:
    """Arguments of ``policy_loss_fn: dpo``."""

    beta: float = 0.1  # inverse temperature of the implicit reward
    label_smoothing: float = 0.0  # assumed probability that a preference label is flipped

    def __post_init__(self) -> None:
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")
        if not 0.0 <= self.label_smoothing < 0.5:
            raise ValueError(f"label_smoothing must be in [0, 0.5), got {self.label_smoothing}")


@dataclass
class GSPOPolicyLossArgs:
    """Arguments of ``policy_loss_fn: gspo``."""

    clip_range: float | None = None  # both sides, unless the side is given below
    clip_range_low: float | None = None  # None -> clip_range, else the paper's 3e-4
    clip_range_high: float | None = None  # None -> clip_range, else the paper's 4e-4
    loss_agg_mode: str = "seq-mean-token-mean"

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)
        if self.clip_range_low is None:
            self.clip_range_low = 3e-4 if self.clip_range is None else self.clip_range
        if self.clip_range_high is None:
            self.clip_range_high = 4e-4 if self.clip_range is None else self.clip_range
        if self.clip_range_low < 0 or self.clip_range_high < 0:
            raise ValueError("clip ranges must be >= 0")


@dataclass
class M2POPolicyLossArgs:
    """Arguments of ``policy_loss_fn: m2po``."""

    m2_threshold: float = 0.04  # tau: bound of the trust region's mean squared log-ratio
    log_ratio_clip: float = 20.0  # |log-ratio| bound before exp (the gradient passes through)
    loss_agg_mode: str = "token-mean"  # the paper divides by every valid token

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)
        if self.loss_agg_mode != "token-mean":
            raise ValueError(
                f"m2po's loss_agg_mode must be token-mean (the paper's mean over every valid "
                f"token), got {self.loss_agg_mode!r}; valid: token-mean"
            )
        if not math.isfinite(self.m2_threshold) or self.m2_threshold < 0:
            raise ValueError(f"m2_threshold must be >= 0 and finite, got {self.m2_threshold}")
        if not math.isfinite(self.log_ratio_clip) or self.log_ratio_clip <= 0:
            raise ValueError(f"log_ratio_clip must be > 0 and finite, got {self.log_ratio_clip}")


@dataclass
class OPMDPolicyLossArgs:
    """Arguments of ``policy_loss_fn: opmd``."""

    tau: float = 1.0  # strength of the mirror-descent regulariser
    loss_agg_mode: str = "token-mean"

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)
        if self.tau < 0:
            raise ValueError(f"tau must be >= 0, got {self.tau}")


@dataclass
class RECPolicyLossArgs:
    """Arguments of ``policy_loss_fn: rec``."""

    epsilon_low: float = 0.2  # ratio floor 1 - epsilon_low of the clip tests
    epsilon_high: float = 0.2  # ratio ceiling 1 + epsilon_high of the clip tests
    epsilon_low_prime: float = 0.6  # ring: A >= 0 tokens below 1 - this are kept
    epsilon_high_prime: float = 2.0  # ring: A <= 0 tokens above 1 + this are kept
    clip_mode: str = "none"  # none, one-side, gspo-one-side, two-side, ring
    weight: str = "none"  # none, importance_sampling, gspo_importance_sampling, advantage
    regularizer: str = "none"  # none, k2, forward-kl
    regularizer_coef: float = 0.0  # weight of the regulariser
    temp: float = 1.0  # temperature of the advantage weight exp(A / temp)
    loss_agg_mode: str = "token-mean"

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)
        _check_choice("clip_mode", self.clip_mode, CLIP_MODES)
        _check_choice("weight", self.weight, WEIGHTS)
        _check_choice("regularizer", self.regularizer, REGULARIZERS)
        for name in ("epsilon_low", "epsilon_low_prime"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        for name in ("epsilon_high", "epsilon_high_prime", "temp"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.regularizer_coef < 0:
            raise ValueError(f"regularizer_coef must be >= 0, got {self.regularizer_coef}")


@dataclass
class SAPOPolicyLossArgs:
    """Arguments of ``policy_loss_fn: sapo``."""

    tau_pos: float = 1.0  # gate temperature for A > 0
    tau_neg: float = 1.05  # gate temperature for A <= 0; >= tau_pos
    loss_agg_mode: str = "token-mean"

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)
        if self.tau_pos <= 0:
            raise ValueError(f"tau_pos must be > 0, got {self.tau_pos}")
        if self.tau_neg < self.tau_pos:
            raise ValueError(
                f"tau_neg must be >= tau_pos, got tau_neg {self.tau_neg} < {self.tau_pos}"
            )


@dataclass
class SFTPhiLossArgs:
    """Arguments of ``policy_loss_fn: sft_phi``."""

    loss_agg_mode: str = "token-mean"
    cutoff_prob: float = 1.0  # tokens more likely than this get no gradient

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)
        if not 0.0 < self.cutoff_prob <= 1.0:
            raise ValueError(f"cutoff_prob must be in (0, 1], got {self.cutoff_prob}")


@dataclass
class SPPOPolicyLossArgs:
    """Arguments of ``policy_loss_fn: sppo``."""

    epsilon: float = 0.3  # trust region [1 / (1 + epsilon), 1 + epsilon] of the ratio
    loss_agg_mode: str = "token-mean"

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)
        if self.epsilon <= 0:
            raise ValueError(f"epsilon must be > 0, got {self.epsilon}")


@dataclass
class TOPRPolicyLossArgs:
    """Arguments of ``policy_loss_fn: topr``."""

    advantage_threshold: float = 0.0  # A_t above it counts as a positive example
    loss_agg_mode: str = "token-mean"

    def __post_init__(self) -> None:
        check_loss_agg_mode(self.loss_agg_mode)
