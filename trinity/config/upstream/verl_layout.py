"""veRL's layout of ``trainer.trainer_config``: its sections as typed dataclasses.

Users coming from veRL write ``actor_rollout_ref``, ``critic`` and ``trainer`` here with
the names they know. The built-in trainer reads them; ``resolve`` keeps them consistent
with the short forms (``trainer.grad_clip``, ``algorithm.optimizer``, ...). Fields left
``None`` inherit from the actor, as veRL's own interpolations do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from trinity.config.schema.algorithm import OptimizerConfig
from trinity.config.setting import setting

CheckpointContent = Literal["model", "optimizer", "extra", "hf_model"]


@dataclass
class WrapPolicyConfig:
    """Which modules become separate data-parallel shards."""

    transformer_layer_cls_to_wrap: list[str] | None = setting(
        None, "class names of the layers wrapped one by one; unset: the model's decoder layers"
    )
    min_num_params: int = setting(
        0, "wrap any module with at least this many parameters (0: by class only)"
    )


@dataclass
class FsdpConfig:
    """Sharding and offloading of one model."""

    wrap_policy: WrapPolicyConfig = setting(WrapPolicyConfig, "module wrapping policy")
    param_offload: bool = setting(
        False,
        "keep parameters in host memory between uses (the actor's, on CUDA: FSDP2's "
        "CPUOffloadPolicy; on CPU they are there already)",
    )
    optimizer_offload: bool = setting(
        False,
        "keep optimizer state in host memory between steps (the actor's, on CUDA, with "
        "param_offload's policy)",
    )
    fsdp_size: int = setting(-1, "ranks per sharding group; -1: all ranks")
    forward_prefetch: bool = setting(False, "prefetch the next shard during the forward pass")


@dataclass
class FusedKernelOptions:
    """Backend of the fused kernels."""

    impl_backend: Literal["triton", "torch"] | None = setting(
        None, "triton or torch; unset: the default of the kernels"
    )


@dataclass
class ActorModelConfig:
    """How the policy model is built for training."""

    external_lib: str | None = setting(
        None, "module imported first in every process of the run (custom architectures, plugins)"
    )
    override_config: dict[str, Any] = setting(
        {}, "entries replacing those of the model's config.json, in trainer and rollout engines"
    )
    enable_gradient_checkpointing: bool = setting(
        True, "recompute activations in backward to save memory"
    )
    use_remove_padding: bool = setting(True, "pack sequences without pad tokens for speed")
    use_fused_kernels: bool = setting(False, "use fused kernels for logprobs and entropy")
    fused_kernel_options: FusedKernelOptions = setting(
        FusedKernelOptions, "options of the fused kernels"
    )


@dataclass
class CheckpointContentsConfig:
    """What a checkpoint holds."""

    load_contents: list[CheckpointContent] = setting(
        ["model", "optimizer", "extra"],
        "parts read when resuming (model, optimizer, extra: LR schedule and RNG states; "
        "hf_model: the weights from huggingface/ instead of the model shards)",
    )
    save_contents: list[CheckpointContent] = setting(
        ["model", "optimizer", "extra"],
        "parts written at save time; the model always; hf_model adds its weights to huggingface/",
    )


@dataclass
class ActorConfig:
    """Policy update: micro-batching, epochs, clipping, optimizer, sharding."""

    strategy: Literal["fsdp", "fsdp2"] = setting(
        "fsdp", "data-parallel strategy name (veRL compatibility)"
    )
    ppo_mini_batch_size: int | None = setting(
        None,
        "experiences per optimizer step; always buffer.train_batch_size, which overrides it",
    )
    ppo_micro_batch_size_per_gpu: int = setting(
        4, "experiences per forward/backward pass on one rank"
    )
    use_dynamic_bsz: bool = setting(
        False, "pack micro-batches by token count instead of a fixed size"
    )
    ppo_max_token_len_per_gpu: int = setting(
        16384, "tokens per packed micro-batch on one rank (use_dynamic_bsz)"
    )
    grad_clip: float = setting(1.0, "clip the global gradient norm to this value")
    ppo_epochs: int = setting(1, "passes over each train batch")
    shuffle: bool = setting(False, "shuffle experiences between passes")
    ulysses_sequence_parallel_size: int = setting(1, "ranks one sequence is split over")
    entropy_from_logits_with_chunking: bool = setting(
        False, "compute entropy in chunks to lower peak memory"
    )
    entropy_checkpointing: bool = setting(
        False, "recompute entropy in backward instead of storing it"
    )
    checkpoint: CheckpointContentsConfig = setting(CheckpointContentsConfig, "checkpoint contents")
    freeze_vision_tower: bool = setting(
        False,
        "keep a vision-language model's vision encoder and projector fixed (no effect on a "
        "text model)",
    )
    optim: OptimizerConfig | None = setting(
        None,
        "actor optimizer; resolved from algorithm.optimizer, which wins where the two differ (logged)",
    )
    fsdp_config: FsdpConfig = setting(FsdpConfig, "sharding of the policy")


@dataclass
class RefConfig:
    """The frozen reference model; unset values follow the actor."""

    fsdp_config: FsdpConfig = setting(FsdpConfig, "sharding of the reference model")
    log_prob_micro_batch_size_per_gpu: int | None = setting(
        None, "experiences per reference forward pass on one rank; unset: the actor's micro-batch"
    )
    log_prob_use_dynamic_bsz: bool | None = setting(None, "pack by token count; unset: the actor's")
    log_prob_max_token_len_per_gpu: int | None = setting(
        None, "tokens per packed micro-batch; unset: the actor's"
    )
    ulysses_sequence_parallel_size: int | None = setting(
        None, "sequence-parallel size; unset: the actor's"
    )
    entropy_from_logits_with_chunking: bool | None = setting(
        None, "chunked entropy; unset: the actor's"
    )
    entropy_checkpointing: bool | None = setting(None, "entropy recomputation; unset: the actor's")


@dataclass
class RolloutLogProbConfig:
    """Recomputing old logprobs of rollouts in the trainer; unset values follow the actor."""

    log_prob_micro_batch_size_per_gpu: int | None = setting(
        None, "experiences per forward pass on one rank; unset: the actor's micro-batch"
    )
    log_prob_use_dynamic_bsz: bool | None = setting(None, "pack by token count; unset: the actor's")
    log_prob_max_token_len_per_gpu: int | None = setting(
        None, "tokens per packed micro-batch; unset: the actor's"
    )


@dataclass
class ActorRolloutRefConfig:
    """Policy, reference model and logprob recomputation."""

    hybrid_engine: bool = setting(True, "actor and reference share the trainer's ranks")
    model: ActorModelConfig = setting(ActorModelConfig, "how the policy is built")
    actor: ActorConfig = setting(ActorConfig, "policy update")
    ref: RefConfig = setting(RefConfig, "reference model")
    rollout: RolloutLogProbConfig = setting(RolloutLogProbConfig, "old-logprob recomputation")


@dataclass
class CriticModelConfig:
    """How the critic (value model) is built."""

    override_config: dict[str, Any] = setting({}, "entries overriding the critic model's config")
    external_lib: str | None = setting(
        None, "module imported before the critic is built; unset: the actor's"
    )
    enable_gradient_checkpointing: bool = setting(
        True, "recompute activations in backward to save memory"
    )
    use_remove_padding: bool = setting(False, "pack sequences without pad tokens for speed")
    fsdp_config: FsdpConfig = setting(FsdpConfig, "sharding of the critic")


@dataclass
class CriticConfig:
    """Value-model update (used when algorithm.use_critic); unset values follow the actor."""

    strategy: Literal["fsdp", "fsdp2"] = setting(
        "fsdp", "data-parallel strategy name (veRL compatibility)"
    )
    optim: OptimizerConfig = setting(
        factory=lambda: OptimizerConfig(lr=1e-5), help="critic optimizer"
    )
    model: CriticModelConfig = setting(CriticModelConfig, "how the critic is built")
    ppo_micro_batch_size_per_gpu: int = setting(
        8, "experiences per critic forward/backward pass on one rank"
    )
    forward_micro_batch_size_per_gpu: int | None = setting(
        None, "experiences per value-only forward pass; unset: ppo_micro_batch_size_per_gpu"
    )
    use_dynamic_bsz: bool | None = setting(None, "pack by token count; unset: the actor's")
    ppo_max_token_len_per_gpu: int | None = setting(
        None, "tokens per packed micro-batch; unset: twice the actor's"
    )
    forward_max_token_len_per_gpu: int | None = setting(
        None, "tokens per packed value-only micro-batch; unset: ppo_max_token_len_per_gpu"
    )
    ulysses_sequence_parallel_size: int = setting(1, "ranks one sequence is split over")
    ppo_epochs: int | None = setting(None, "passes over each train batch; unset: the actor's")
    shuffle: bool | None = setting(None, "shuffle between passes; unset: the actor's")
    grad_clip: float = setting(1.0, "clip the critic's gradient norm to this value")
    cliprange_value: float = setting(0.5, "clip range of the value loss")


@dataclass
class VerlLoopConfig:
    """Checkpointing and resumption of the training loop."""

    balance_batch: bool = setting(True, "balance tokens across ranks when splitting a batch")
    resume_mode: Literal["auto", "disable", "resume_path"] = setting(
        "auto",
        "where a run with continue_from_checkpoint resumes: auto after the newest full "
        "checkpoint; disable from step 0 in the same job dir; resume_path after resume_from_path",
    )
    resume_from_path: str = setting(
        "", "a global_step_<N> directory of this run's job dir (resume_mode resume_path)"
    )
    critic_warmup: int = setting(0, "steps that train only the critic before the policy is updated")
    nnodes: int | None = setting(
        None, "nodes the trainer ranks run on; unset: from cluster (1 on CPU)"
    )
    n_gpus_per_node: int | None = setting(
        None,
        "trainer ranks on each node (GPUs on a GPU cluster, processes on CPU); unset: from cluster (1 on CPU)",
    )
    default_hdfs_dir: str | None = setting(None, "remote directory checkpoints are copied to")
    val_before_train: bool = setting(False, "veRL: validate before the first train step")
    remove_previous_ckpt_in_save: bool = setting(
        False, "keep only the newest checkpoint (overrides max_actor/critic_ckpt_to_keep)"
    )
    del_local_ckpt_after_load: bool = setting(
        False, "delete a local checkpoint once it has been loaded"
    )
    max_actor_ckpt_to_keep: int | None = setting(
        None, "most full actor checkpoints kept; unset: all (weights-only saves: the newest)"
    )
    max_critic_ckpt_to_keep: int | None = setting(
        None, "most checkpoints that keep their critic/; unset: all"
    )


@dataclass
class RolloutCorrectionConfig:
    """Correction for the rollout engine's log-probs differing from the trainer's
    (trinity/algorithm/rollout_correction.py)."""

    rollout_is: Literal["token", "sequence"] | None = setting(
        None,
        "truncated importance sampling: each token's loss times "
        "min(exp(old_logprobs - rollout_logprobs), rollout_is_threshold), per token or "
        "per sequence; needs bypass_mode false; unset: off",
    )
    rollout_is_threshold: float = setting(2.0, "cap of the importance weights")
    rollout_is_batch_normalize: bool = setting(
        False, "rescale the truncated weights to mean 1 over the batch"
    )
    rollout_rs: str | None = setting(None, "rejection sampling by the ratio (veRL); unset: off")
    rollout_rs_threshold: float | None = setting(None, "upper ratio bound of rejection sampling")
    rollout_rs_threshold_lower: float | None = setting(
        None, "lower ratio bound of rejection sampling"
    )
    rollout_token_veto_threshold: float | None = setting(
        None, "reject a sequence holding a token with a ratio below this (veRL)"
    )
    bypass_mode: bool = setting(
        True,
        "use the rollout engine's log-probs as the old log-probs (no recomputation); "
        "false: the trainer recomputes them at the start of each step",
    )
    loss_type: str = setting("ppo_clip", "policy loss of veRL's bypass mode; ours: policy_loss_fn")


@dataclass
class VerlAlgorithmConfig:
    """veRL's ``algorithm`` section; the algorithm itself is the top-level ``algorithm``."""

    rollout_correction: RolloutCorrectionConfig = setting(
        RolloutCorrectionConfig, "rollout-trainer log-prob mismatch correction"
    )


@dataclass
class VerlTrainerConfig:
    """The whole ``trainer.trainer_config`` (or the file named by ``trainer_config_path``)."""

    actor_rollout_ref: ActorRolloutRefConfig = setting(
        ActorRolloutRefConfig, "policy, reference and logprobs"
    )
    critic: CriticConfig = setting(CriticConfig, "value model")
    algorithm: VerlAlgorithmConfig = setting(VerlAlgorithmConfig, "rollout correction")
    trainer: VerlLoopConfig = setting(VerlLoopConfig, "checkpointing and resumption")
