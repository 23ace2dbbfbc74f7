"""``trainer``: the training loop, checkpointing, and short forms of common veRL settings.

The short forms (``grad_clip``, ``use_dynamic_bsz``, ...) override the matching fields of
``trainer_config.actor_rollout_ref``; ``resolve`` writes the effective value to both places.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trinity.config.setting import setting
from trinity.config.upstream.verl_layout import VerlTrainerConfig

SaveStrategy = Literal["single_thread", "single_process", "single_node", "unrestricted"]


@dataclass
class TrainerConfig:
    """The trainer: backend, checkpoints and the length of training."""

    name: str = setting("trainer", "Ray actor name of the trainer; unique per experiment")
    trainer_type: Literal["torch", "verl"] = setting(
        "torch",
        "training backend; verl names the same built-in trainer configured in the veRL layout",
    )
    trainer_strategy: Literal["fsdp", "fsdp2"] = setting(
        "fsdp", "veRL's data-parallel strategy name (megatron is not supported)"
    )
    save_interval: int = setting(0, "train steps between checkpoints; 0: only at the end")
    enable_preview: bool = setting(
        True, "show sample rollouts in the wandb run (Trinity-RFT's key)"
    )
    total_steps: int | None = setting(
        None, "train steps of the run; unset: derived from buffer.total_steps when it is set"
    )
    save_strategy: SaveStrategy = setting(
        "unrestricted",
        "which trainer ranks write checkpoint shards at the same time: single_thread and "
        "single_process one rank at a time (each rank writes from one thread), single_node "
        "one node at a time, unrestricted all ranks at once",
    )
    trainer_config: VerlTrainerConfig | None = setting(
        None, "detailed settings in the veRL layout; unset: defaults (or trainer_config_path)"
    )
    trainer_config_path: str = setting(
        "",
        "YAML file with the detailed settings; read by load_config; exclusive with trainer_config",
    )
    use_dynamic_bsz: bool | None = setting(
        None, "pack micro-batches by token count; overrides actor.use_dynamic_bsz"
    )
    max_token_len_per_gpu: int | None = setting(
        None, "tokens per packed micro-batch on one rank; overrides actor.ppo_max_token_len_per_gpu"
    )
    ppo_max_token_len_per_gpu: int | None = setting(
        None, "the same as max_token_len_per_gpu (the name the FAQ's OOM advice uses)"
    )
    ulysses_sequence_parallel_size: int | None = setting(
        None, "sequence-parallel size; overrides actor.ulysses_sequence_parallel_size"
    )
    grad_clip: float | None = setting(None, "gradient-norm clip; overrides actor.grad_clip")
    enable_gradient_checkpointing: bool | None = setting(
        None,
        "recompute activations in backward; overrides actor_rollout_ref.model.enable_gradient_checkpointing",
    )
    keep_memory_between_steps: bool = setting(
        True,
        "keep the memory a train step freed for the next one, whose tensors then reuse "
        "pages already mapped (faster steps; the trainer stays at its in-step peak size); "
        "false: return it to the OS after each step (less memory between steps, steps "
        "fault fresh pages in)",
    )
