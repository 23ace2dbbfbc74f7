"""What the built-in trainer reads: policy, critic, rollout correction and checkpoints.

The config file gives these in veRL's layout (``trainer.trainer_config``) and in short
forms; ``trinity.config.upstream.verl.trainer_settings`` turns a resolved ``trainer``
section into these native values, so no code outside ``trinity/config`` walks veRL paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from trinity.config.schema.algorithm import OptimizerConfig


@dataclass(frozen=True)
class Batching:
    """How the rows of a batch are split into the micro-batches of one pass on one rank."""

    micro_batch_size: int  # rows per micro-batch (at least 1)
    max_tokens: int | None  # tokens per packed micro-batch; None: split by row count


@dataclass(frozen=True)
class Offload:
    """Host-memory offloading of one sharded model (on CUDA; the CPU keeps all there)."""

    param_offload: bool
    optimizer_offload: bool


@dataclass(frozen=True)
class PolicySettings:
    """The policy: how it is built, updated, and how its log-prob passes are batched."""

    external_lib: str | None  # module imported first in every process
    override_config: dict[str, Any]  # entries replacing those of config.json
    gradient_checkpointing: bool
    freeze_vision_tower: bool
    offload: Offload
    update: Batching  # forward/backward passes of the update
    epochs: int  # passes over each train batch
    grad_clip: float
    ref_logprobs: Batching  # the reference model's log-prob passes
    old_logprobs: Batching  # recomputed old log-probs (rollout correction)
    save_contents: frozenset[str]  # checkpoint parts written: model, optimizer, extra, hf_model
    load_contents: frozenset[str]  # checkpoint parts read when resuming


@dataclass(frozen=True)
class CriticSettings:
    """The value model: how it is built, its optimizer and its passes."""

    external_lib: str | None
    override_config: dict[str, Any]
    gradient_checkpointing: bool
    optimizer: OptimizerConfig
    update: Batching  # forward/backward passes of the update
    values: Batching  # value-only forward passes
    epochs: int
    grad_clip: float
    cliprange_value: float


@dataclass(frozen=True)
class RolloutCorrection:
    """Correction for the rollout engine's log-probs differing from the trainer's."""

    rollout_is: Literal["token", "sequence"] | None  # truncated importance sampling level
    rollout_is_threshold: float
    rollout_is_batch_normalize: bool
    bypass_mode: bool  # true: the engine's log-probs are the old log-probs


ResumeMode = Literal["auto", "disable", "resume_path"]


@dataclass(frozen=True)
class LoopSettings:
    """The training loop around the updates: warm-up, rank balance, checkpoints, resumption."""

    critic_warmup: int  # steps that train only the critic
    balance_batch: bool  # deal rows to ranks by token count
    resume_mode: ResumeMode
    resume_from_path: str  # a global_step_<N> directory (resume_mode resume_path)
    keep_only_newest: bool  # keep one checkpoint, over the two limits below
    max_actor_ckpt_to_keep: int | None  # None: all
    max_critic_ckpt_to_keep: int | None  # None: all


@dataclass(frozen=True)
class TrainerSettings:
    """Everything the trainer reads beyond ``algorithm`` and ``model``."""

    policy: PolicySettings
    critic: CriticSettings
    rollout_correction: RolloutCorrection
    loop: LoopSettings
