"""veRL's ``trainer.trainer_config`` layout translated into the trainer's native settings.

``resolve`` has filled the layout's unset values from the actor and the short forms
(``trainer.grad_clip``, ``algorithm.optimizer``, ...); this reads the filled layout and
returns :class:`~trinity.config.trainer_settings.TrainerSettings`. A section without a
``trainer_config`` (not resolved) reads as veRL's defaults.
"""

from __future__ import annotations

from trinity.config.schema.trainer import TrainerConfig
from trinity.config.trainer_settings import (
    Batching,
    CriticSettings,
    LoopSettings,
    Offload,
    PolicySettings,
    RolloutCorrection,
    TrainerSettings,
)
from trinity.config.upstream.verl_layout import (
    ActorRolloutRefConfig,
    CriticConfig,
    FsdpConfig,
    RolloutCorrectionConfig,
    VerlLoopConfig,
    VerlTrainerConfig,
)


def trainer_settings(trainer: TrainerConfig) -> TrainerSettings:
    """The native settings of ``trainer`` (a resolved ``trainer`` section)."""
    tc = trainer.trainer_config or VerlTrainerConfig()
    return TrainerSettings(
        policy=_policy(tc.actor_rollout_ref),
        critic=_critic(tc.critic),
        rollout_correction=_rollout_correction(tc.algorithm.rollout_correction),
        loop=_loop(tc.trainer),
    )


def _batching(
    micro_batch_size: int | None, dynamic: bool | None, max_tokens: int | None
) -> Batching:
    """veRL's (micro-batch size, use_dynamic_bsz, token budget) triple of one pass."""
    return Batching(
        micro_batch_size=max(1, int(micro_batch_size or 1)),
        max_tokens=int(max_tokens) if dynamic and max_tokens is not None else None,
    )


def _offload(fsdp: FsdpConfig) -> Offload:
    return Offload(param_offload=fsdp.param_offload, optimizer_offload=fsdp.optimizer_offload)


def _policy(arr: ActorRolloutRefConfig) -> PolicySettings:
    actor, ref, old = arr.actor, arr.ref, arr.rollout
    return PolicySettings(
        external_lib=arr.model.external_lib,
        override_config=dict(arr.model.override_config),
        gradient_checkpointing=arr.model.enable_gradient_checkpointing,
        freeze_vision_tower=actor.freeze_vision_tower,
        offload=_offload(actor.fsdp_config),
        update=_batching(
            actor.ppo_micro_batch_size_per_gpu,
            actor.use_dynamic_bsz,
            actor.ppo_max_token_len_per_gpu,
        ),
        epochs=max(1, int(actor.ppo_epochs)),
        grad_clip=float(actor.grad_clip),
        ref_logprobs=_batching(
            ref.log_prob_micro_batch_size_per_gpu,
            ref.log_prob_use_dynamic_bsz,
            ref.log_prob_max_token_len_per_gpu,
        ),
        old_logprobs=_batching(
            old.log_prob_micro_batch_size_per_gpu,
            old.log_prob_use_dynamic_bsz,
            old.log_prob_max_token_len_per_gpu,
        ),
        save_contents=frozenset(actor.checkpoint.save_contents),
        load_contents=frozenset(actor.checkpoint.load_contents),
    )


def _critic(critic: CriticConfig) -> CriticSettings:
    update_size = critic.ppo_micro_batch_size_per_gpu
    return CriticSettings(
        external_lib=critic.model.external_lib,
        override_config=dict(critic.model.override_config),
        gradient_checkpointing=critic.model.enable_gradient_checkpointing,
        optimizer=critic.optim,
        update=_batching(update_size, critic.use_dynamic_bsz, critic.ppo_max_token_len_per_gpu),
        values=_batching(
            critic.forward_micro_batch_size_per_gpu or update_size,
            critic.use_dynamic_bsz,
            critic.forward_max_token_len_per_gpu,
        ),
        epochs=max(1, int(critic.ppo_epochs or 1)),
        grad_clip=float(critic.grad_clip),
        cliprange_value=float(critic.cliprange_value),
    )


def _rollout_correction(rc: RolloutCorrectionConfig) -> RolloutCorrection:
    return RolloutCorrection(
        rollout_is=rc.rollout_is,
        rollout_is_threshold=rc.rollout_is_threshold,
        rollout_is_batch_normalize=rc.rollout_is_batch_normalize,
        bypass_mode=rc.bypass_mode,
    )


def _loop(loop: VerlLoopConfig) -> LoopSettings:
    return LoopSettings(
        critic_warmup=int(loop.critic_warmup),
        balance_batch=bool(loop.balance_batch),
        resume_mode=loop.resume_mode,
        resume_from_path=loop.resume_from_path,
        keep_only_newest=loop.remove_previous_ckpt_in_save,
        max_actor_ckpt_to_keep=loop.max_actor_ckpt_to_keep,
        max_critic_ckpt_to_keep=loop.max_critic_ckpt_to_keep,
    )
