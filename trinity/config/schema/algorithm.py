"""``algorithm``: which RL algorithm runs and the named parts it is built from.

Parts left unset (``None``) are filled by ``resolve`` from the per-algorithm table in
``trinity/config/algorithm_defaults.py``; whatever the user sets wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from trinity.config.setting import setting

LossAggMode = Literal[
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]


@dataclass
class OptimizerConfig:
    """AdamW and its learning-rate schedule."""

    lr: float = setting(1e-6, "peak learning rate")
    lr_warmup_steps: int = setting(
        -1, "linear warm-up steps; -1 uses lr_warmup_steps_ratio instead"
    )
    lr_warmup_steps_ratio: float = setting(
        0.0, "warm-up steps as a fraction of total_training_steps"
    )
    lr_scheduler_type: Literal["constant", "cosine", "linear"] | None = setting(
        None,
        "schedule after warm-up: constant, cosine or linear decay to min_lr_ratio * lr at "
        "total_training_steps; unset: warmup_style",
    )
    warmup_style: Literal["constant", "cosine", "linear"] = setting(
        "constant", "older name of lr_scheduler_type, used when that is unset"
    )
    min_lr_ratio: float = setting(
        0.0, "final learning rate of the cosine and linear schedules, as a fraction of lr"
    )
    weight_decay: float = setting(0.01, "decoupled (AdamW) weight decay")
    betas: list[float] = setting([0.9, 0.999], "AdamW (beta1, beta2)")
    total_training_steps: int = setting(
        -1, "steps the schedule spans; -1 is filled from the run's total steps when known"
    )


@dataclass
class DynamicSamplingConfig:
    """DAPO's dynamic sampling: groups whose scores all tie are dropped and the explorer
    rolls out further tasks until the step holds ``buffer.batch_size`` groups."""

    enable: bool | None = setting(None, "drop tied groups and refill; unset: per algorithm (dapo)")
    metric_key: str | None = setting(
        None, "reward component compared within a group (e.g. accuracy); unset: the reward"
    )
    max_extra_rounds: int = setting(
        4, "extra batches of tasks an explore step rolls out at most to refill"
    )


@dataclass
class AlgorithmConfig:
    """The algorithm type, its part names and their arguments."""

    algorithm_type: str = setting(
        "ppo", "ppo, grpo, opmd, dpo, sft, mix, rloo, reinforceplusplus or gspo"
    )
    repeat_times: int = setting(1, "rollouts per task (group size); dpo always uses 2")
    sample_strategy: str | None = setting(
        None, "how the trainer reads experiences; unset: per algorithm"
    )
    sample_strategy_args: dict[str, Any] = setting({}, "arguments of sample_strategy")
    advantage_fn: str | None = setting(None, "advantage estimator; unset: per algorithm")
    advantage_fn_args: dict[str, Any] = setting({}, "arguments of advantage_fn")
    policy_loss_fn: str | None = setting(None, "policy loss; unset: per algorithm")
    policy_loss_fn_args: dict[str, Any] = setting(
        {}, "arguments of policy_loss_fn (e.g. clip ranges)"
    )
    kl_penalty_fn: str | None = setting(
        None, "KL penalty subtracted from rewards ('none' disables); unset: per algorithm"
    )
    kl_penalty_fn_args: dict[str, Any] = setting({}, "arguments of kl_penalty_fn (e.g. kl_coef)")
    kl_loss_fn: str | None = setting(
        None, "KL term added to the loss ('none' disables); unset: per algorithm"
    )
    kl_loss_fn_args: dict[str, Any] = setting({}, "arguments of kl_loss_fn (e.g. kl_coef)")
    entropy_loss_fn: str | None = setting(
        None, "entropy term of the loss ('none' disables); unset: per algorithm"
    )
    entropy_loss_fn_args: dict[str, Any] = setting(
        {}, "arguments of entropy_loss_fn (e.g. entropy_coef)"
    )
    loss_agg_mode: LossAggMode = setting(
        "token-mean", "how per-token losses are reduced to one number"
    )
    optimizer: OptimizerConfig = setting(OptimizerConfig, "optimizer of the policy (actor)")
    dynamic_sampling: DynamicSamplingConfig = setting(
        DynamicSamplingConfig, "drop groups whose rewards tie and refill the step (dapo)"
    )
    use_critic: bool | None = setting(None, "train a value model; unset: per algorithm (ppo only)")
    use_reference: bool | None = setting(
        None,
        "keep a frozen reference model; unset: when a KL part is active or the algorithm needs one",
    )
    bypass_old_logprobs: bool = setting(
        True,
        "use the rollout engine's log-probs as the old log-probs; false: the trainer "
        "recomputes them with the policy before each step (as rollout_correction.bypass_mode "
        "false does); m2po needs true",
    )
