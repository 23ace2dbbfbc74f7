"""The trainer: turns batches of experiences into policy (and critic) updates.

``train_step`` reads top to bottom:

    prepare:  collate -> reference log-probs -> critic values -> token rewards
              (minus the KL penalty) -> advantages and returns
    critic:   value-loss update on the returns (PPO)
    actor:    for each PPO epoch: micro-batch forward, loss, backward (gradient
              accumulation) -> clip, step; skipped for the first ``critic_warmup`` steps

Every algorithm type runs through the same steps; its parts decide what each does (sft
and dpo have no advantages, only ppo has a critic, ...). The maths lives in
``trinity.algorithm``; this module only wires it to models and optimizers.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from trinity.algorithm import ADVANTAGE_FN, ENTROPY_LOSS_FN, KL_FN, POLICY_LOSS_FN
from trinity.algorithm.advantage.base import AdvantageInputs
from trinity.algorithm.args import build
from trinity.algorithm.loss_agg import LossNormalizer
from trinity.algorithm.rollout_correction import rollout_is_weights
from trinity.config import Config
from trinity.config.algorithm_defaults import NONE
from trinity.models.overrides import model_config
from trinity.trainer import checkpoint as ckpt
from trinity.trainer import distributed, lora
from trinity.trainer.actor import forward_logprobs, use_grouped_attention
from trinity.trainer.batch import TrainBatch, collate
from trinity.trainer.critic import Critic, enable_checkpointing
from trinity.trainer.fused_layers import fuse_layers
from trinity.trainer.optim import build_optimizer
from trinity.trainer.precision import MasterWeights
from trinity.types import Experience

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


class TrainerSetupError(ValueError):
    """The algorithm's parts need a model or input the config does not provide."""


# policy losses whose gradient is zero where the advantages are (see rows_with_gradient)
LINEAR_IN_ADVANTAGE = ("ppo", "gspo")


def compute_dtype(name: str) -> torch.dtype:
    return _DTYPES[name]


def token_level_rewards(batch: TrainBatch) -> torch.Tensor:
    """(B, R) with each sequence's reward on its last valid response token."""
    mask = batch.action_mask
    rewards = torch.zeros_like(mask)
    positions = torch.arange(mask.shape[1]).expand_as(mask)
    last = torch.where(mask > 0, positions, torch.full_like(positions, -1)).max(dim=1).values
    has_token = last >= 0
    rows = torch.nonzero(has_token).squeeze(1)
    rewards[rows, last[has_token]] = batch.rewards[has_token].to(rewards.dtype)
    return rewards


def policy_loss_args(config: Config) -> dict[str, Any]:
    """``policy_loss_fn_args``, with ``algorithm.loss_agg_mode`` filled in when the loss
    aggregates tokens and its args leave the mode unset (the args win when they set it)."""
    algo = config.algorithm
    args = dict(algo.policy_loss_fn_args)
    loss_cls = POLICY_LOSS_FN.get(algo.policy_loss_fn)
    names = (
        {f.name for f in dataclasses.fields(loss_cls.Args)}
        if dataclasses.is_dataclass(getattr(loss_cls, "Args", None))
        else set()
    )
    if "loss_agg_mode" in names and "loss_agg_mode" not in args:
        args["loss_agg_mode"] = algo.loss_agg_mode
    return args


def _rollout_temperature(config: Config) -> float:
    taskset = config.buffer.explorer_input.taskset
    if taskset is None or not taskset.rollout_args.temperature:
        return 1.0
    return float(taskset.rollout_args.temperature)


def _rows_of(values: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor | None:
    """``values[rows]``, or None for a batch field that is not set."""
    return None if values is None else values[rows]


def _with_tied_names(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict:
    """``state`` plus the names ``save_pretrained`` left out because they share a
    parameter with a saved name (a tied LM head), so it loads with ``strict=True``."""
    names_of: dict[int, list[str]] = defaultdict(list)
    for name, param in model.named_parameters(remove_duplicate=False):
        names_of[id(param)].append(name)
    full = dict(state)
    for names in names_of.values():
        saved = [n for n in names if n in state]
        for name in names:
            if saved and name not in full:
                full[name] = state[saved[0]]
    return full


class Trainer:
    """Owns the actor, the reference model and the critic (when the algorithm uses them)."""

    def __init__(
        self,
        config: Config,
        *,
        model_dir: str | Path,
        total_steps: int,
        logger: logging.Logger | None = None,
        critic_model_dir: str | Path | None = None,
        rank_info: distributed.RankInfo | None = None,
        bf16_weights: bool | None = None,
    ) -> None:
        """``rank_info``: this process's rank in a data-parallel trainer whose process
        group is already initialised (``trinity.trainer.distributed``); None: one rank.
        ``bf16_weights``: False keeps fp32 parameters under bf16 autocast where bf16
        parameters would be used (None: bf16 parameters wherever they apply)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = config
        self.logger = logger or logging.getLogger("trinity.trainer")
        self.model_dir = Path(model_dir)
        self.total_steps = total_steps
        self.rank = rank_info.rank if rank_info else 0
        self.world_size = rank_info.world_size if rank_info else 1
        self.skipped_rows = 0  # rows of the last mini-batch left out of backward
        algo = config.algorithm
        tc = config.trainer.trainer_config
        actor_cfg = tc.actor_rollout_ref.actor
        torch.manual_seed(config.seed)
        random.seed(config.seed)

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.pad_token_id = self.tokenizer.pad_token_id
        if self.pad_token_id is None:
            self.pad_token_id = self.tokenizer.eos_token_id
        self.compute_dtype = compute_dtype(config.model.dtype)
        # loaded in fp32; with model.dtype bfloat16 on one rank without LoRA the parameters
        # become bf16 and the optimizer keeps fp32 masters (trinity/trainer/precision.py),
        # otherwise fp32 parameters run under bf16 autocast
        self.bf16_weights = (
            self.compute_dtype == torch.bfloat16
            and not config.model.lora_configs
            and self.world_size == 1
            and bf16_weights is not False
        )
        self.autocast_dtype = None if self.bf16_weights else self.compute_dtype
        # model.override_config, as the rollout engines apply it (trinity/models/overrides.py)
        hf_config = model_config(self.model_dir, tc.actor_rollout_ref.model.override_config)
        overridden = {"config": hf_config} if hf_config is not None else {}
        self.model = AutoModelForCausalLM.from_pretrained(
            self.model_dir, dtype=torch.float32, **overridden
        )
        self.model.train()
        use_grouped_attention(self.model)  # bf16 matmuls, grouped K/V: trainer/actor.py
        fuse_layers(self.model)  # bf16 RMS norm and SwiGLU in one pass: trainer/fused_layers.py
        if tc.actor_rollout_ref.model.enable_gradient_checkpointing:
            enable_checkpointing(self.model)
            self.model.config.use_cache = False
        # LoRA: a peft model whose only trainable parameters are the adapter's
        self.lora = config.model.lora_configs[0] if config.model.lora_configs else None
        if self.lora is not None:
            self.model = lora.wrap(self.model, self.lora)
            if tc.actor_rollout_ref.model.enable_gradient_checkpointing:
                self.model.enable_input_require_grads()

        self.policy_loss = build(POLICY_LOSS_FN, algo.policy_loss_fn, policy_loss_args(config))
        self.advantage_fn = None
        if algo.advantage_fn and algo.advantage_fn != NONE:
            self.advantage_fn = build(ADVANTAGE_FN, algo.advantage_fn, algo.advantage_fn_args)
        self.kl_loss = build(KL_FN, algo.kl_loss_fn, algo.kl_loss_fn_args)
        self.kl_penalty = build(KL_FN, algo.kl_penalty_fn, algo.kl_penalty_fn_args)
        self.entropy_loss = build(ENTROPY_LOSS_FN, algo.entropy_loss_fn, algo.entropy_loss_fn_args)
        self.loss_agg_mode = algo.loss_agg_mode
        self.entropy_has_grad = (
            algo.entropy_loss_fn != NONE
            and float(getattr(self.entropy_loss.args, "entropy_coef", 0.0)) != 0.0
        )
        self._check_parts(algo.use_reference, algo.use_critic)
        # rollout correction: bypass_mode false recomputes the old log-probs at each step
        self.rollout_correction = tc.algorithm.rollout_correction
        if (
            self.rollout_correction.rollout_is is not None
            and "rollout_is_weights" not in self.policy_loss.inputs
        ):
            raise TrainerSetupError(
                f"policy_loss_fn '{algo.policy_loss_fn}' does not take rollout correction "
                "weights (trainer_config.algorithm.rollout_correction.rollout_is); use 'ppo' "
                "or set rollout_is to null"
            )

        self.ref_model = None
        if algo.use_reference:
            # the same weights and precision as the actor, so both agree exactly at the start
            self.ref_model = AutoModelForCausalLM.from_pretrained(
                self.model_dir,
                dtype=self.compute_dtype if self.bf16_weights else torch.float32,
                **overridden,
            ).eval()
            self.ref_model.requires_grad_(False)
            use_grouped_attention(self.ref_model)  # the actor's attention
            fuse_layers(self.ref_model)  # and its fused layers
            if tc.actor_rollout_ref.model.enable_gradient_checkpointing:
                # no effect in eval mode, but the actor's forward then picks the same
                # attention kernel for both models (trinity/trainer/actor.py)
                enable_checkpointing(self.ref_model)
        self.critic: Critic | None = None
        if algo.use_critic:
            self.critic = Critic(
                config,
                model_dir=critic_model_dir or self.model_dir,
                total_steps=total_steps,
                compute_dtype=self.compute_dtype,
                logger=self.logger,
            )
        self.critic_warmup = int(tc.trainer.critic_warmup)
        # data parallel: deal rows to ranks by token count (trainer/distributed.py)
        self.balance_batch = bool(tc.trainer.balance_batch)

        if self.world_size > 1:
            if self.critic is not None or self.lora is not None:
                raise TrainerSetupError("a critic or LoRA needs a one-rank trainer")
            distributed.shard_model(self.model)
        self.master = MasterWeights(self.model, self.compute_dtype) if self.bf16_weights else None
        opt = algo.optimizer
        self.optimizer, self.scheduler = build_optimizer(
            self.master.masters
            if self.master is not None
            else [p for p in self.model.parameters() if p.requires_grad],
            lr=opt.lr,
            weight_decay=opt.weight_decay,
            betas=tuple(opt.betas),
            total_steps=total_steps,
            lr_warmup_steps=opt.lr_warmup_steps,
            lr_warmup_steps_ratio=opt.lr_warmup_steps_ratio,
            warmup_style=opt.lr_scheduler_type or opt.warmup_style,
            min_lr_ratio=opt.min_lr_ratio,
        )
        self.micro_batch_size = max(1, int(actor_cfg.ppo_micro_batch_size_per_gpu))
        # use_dynamic_bsz: micro-batches packed to a token budget instead of a row count
        self.max_tokens = (
            int(actor_cfg.ppo_max_token_len_per_gpu) if actor_cfg.use_dynamic_bsz else None
        )
        ref_cfg = tc.actor_rollout_ref.ref
        self.ref_micro_batch_size = max(1, int(ref_cfg.log_prob_micro_batch_size_per_gpu or 1))
        self.ref_max_tokens = (
            int(ref_cfg.log_prob_max_token_len_per_gpu)
            if ref_cfg.log_prob_use_dynamic_bsz
            else None
        )
        old_cfg = tc.actor_rollout_ref.rollout  # recomputed old log-probs (bypass_mode false)
        self.old_micro_batch_size = max(1, int(old_cfg.log_prob_micro_batch_size_per_gpu or 1))
        self.old_max_tokens = (
            int(old_cfg.log_prob_max_token_len_per_gpu)
            if old_cfg.log_prob_use_dynamic_bsz
            else None
        )
        self.grad_clip = float(actor_cfg.grad_clip)
        self.ppo_epochs = max(1, int(actor_cfg.ppo_epochs))
        self.temperature = _rollout_temperature(config)
        self.max_response_tokens = config.model.max_response_tokens
        self.global_step = 0

    def _check_parts(self, use_reference: bool, use_critic: bool) -> None:
        algo = self.config.algorithm
        needs_ref = [
            f"{key} '{name}'"
            for key, name in (
                ("kl_loss_fn", algo.kl_loss_fn),
                ("kl_penalty_fn", algo.kl_penalty_fn),
            )
            if name != NONE
        ]
        if "ref_logprobs" in self.policy_loss.inputs:
            needs_ref.append(f"policy_loss_fn '{algo.policy_loss_fn}'")
        if needs_ref and not use_reference:
            raise TrainerSetupError(
                f"{', '.join(needs_ref)} need(s) the reference model but algorithm.use_reference "
                "is false; set it to true or turn those parts off ('none')"
            )
        if algo.advantage_fn == "ppo" and not use_critic:
            raise TrainerSetupError(
                "advantage_fn 'ppo' (GAE) needs critic values but algorithm.use_critic is false"
            )
        if "advantages" in self.policy_loss.inputs and self.advantage_fn is None:
            raise TrainerSetupError(
                f"policy_loss_fn '{algo.policy_loss_fn}' needs advantages: set algorithm.advantage_fn"
            )

    # ------------------------------------------------------------------ training
    def train_step(self, experiences: list[Experience]) -> dict[str, float]:
        """One update on ``experiences`` (a full train batch); returns metrics."""
        start = time.perf_counter()
        batch, metrics = self.prepare(experiences)
        if self.critic is not None:
            metrics.update(self.critic.update(batch, batch.rl_mask))
        if self.global_step >= self.critic_warmup:
            metrics.update(self._actor_update(batch))
        self.global_step += 1
        metrics.update(self._batch_metrics(batch))
        metrics["actor/lr"] = float(self.scheduler.get_last_lr()[0])
        metrics["time/train_step"] = time.perf_counter() - start
        return metrics

    @torch.no_grad()
    def prepare(self, experiences: list[Experience]) -> tuple[TrainBatch, dict[str, float]]:
        """Collate ``experiences`` and fill reference log-probs, values and advantages."""
        batch = collate(experiences, self.pad_token_id)
        metrics: dict[str, float] = {}
        if not self.rollout_correction.bypass_mode:
            metrics.update(self._correct_rollout(batch))
        if self.ref_model is not None:
            batch.ref_logprobs = self._ref_logprobs(batch)
        if self.critic is not None:
            batch.values = self.critic.values(batch)
        if self.advantage_fn is None:
            return batch, metrics
        rewards = token_level_rewards(batch)
        if batch.ref_logprobs is not None:
            rewards, kl_metrics = self.kl_penalty.apply_penalty(
                rewards, batch.old_logprobs, batch.ref_logprobs, batch.action_mask
            )
            metrics.update({f"critic/{k}": v for k, v in kl_metrics.items()})
        # expert rows (mix) are demonstrations: they take no part in the advantage estimate
        rollout = ~batch.is_expert
        advantages, returns = self.advantage_fn(
            AdvantageInputs(
                token_level_rewards=rewards[rollout],
                action_mask=batch.action_mask[rollout],
                group_ids=batch.group_ids[rollout],
                values=None if batch.values is None else batch.values[rollout],
                old_logprobs=batch.old_logprobs[rollout],
                trajectory_ids=_rows_of(batch.trajectory_ids, rollout),
                step_ids=_rows_of(batch.step_ids, rollout),
                anchor_ids=_rows_of(batch.anchor_ids, rollout),
                step_rewards=_rows_of(batch.step_rewards, rollout),
                teacher_logprobs=_rows_of(batch.teacher_logprobs, rollout),
            )
        )
        batch.advantages = torch.zeros_like(rewards)
        batch.returns = torch.zeros_like(rewards)
        batch.advantages[rollout] = advantages
        batch.returns[rollout] = returns
        return batch, metrics

    def _correct_rollout(self, batch: TrainBatch) -> dict[str, float]:
        """Rollout correction: the policy's own log-probs (before this step's update)
        replace the engine's as ``old_logprobs``, which are kept as ``rollout_logprobs``;
        with ``rollout_is`` the truncated importance weights of the two are set too."""
        rc = self.rollout_correction
        batch.rollout_logprobs = batch.old_logprobs
        batch.old_logprobs = self._logprobs(
            self.model, batch, self.old_micro_batch_size, self.old_max_tokens
        )
        if rc.rollout_is is None:
            return {}
        batch.rollout_is_weights, metrics = rollout_is_weights(
            batch.old_logprobs,
            batch.rollout_logprobs,
            batch.rl_mask,
            level=rc.rollout_is,
            threshold=rc.rollout_is_threshold,
            batch_normalize=rc.rollout_is_batch_normalize,
        )
        return {f"rollout_corr/{k}": v for k, v in metrics.items()}

    def _actor_update(self, batch: TrainBatch) -> dict[str, float]:
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        grad_norms = []
        for _ in range(self.ppo_epochs):
            # the whole train batch is one mini-batch: one optimizer step per epoch
            for k, (total, count) in self.backward(batch).items():
                sums[k] += total
                counts[k] += count
            grad_norms.append(self._optimizer_step())
        metrics = {}
        for k, v in sums.items():
            # loss shares add up to the mini-batch loss; ratios are averaged
            metrics[f"actor/{k}"] = v / self.ppo_epochs if "loss" in k else v / counts[k]
        metrics["actor/grad_norm"] = float(sum(grad_norms) / len(grad_norms))
        metrics["actor/skipped_rows"] = float(self.skipped_rows)
        return metrics

    def backward(self, batch: TrainBatch) -> dict[str, tuple[float, int]]:
        """Accumulate the gradient of the mini-batch loss over micro-batches.

        Every loss is normalised by the counts of the whole batch, so the accumulated
        gradient does not depend on the micro-batch size, nor on leaving out rows whose
        loss has no gradient (:meth:`rows_with_gradient`). Returns, per metric, the sum
        over micro-batches and their number.
        """
        rl_mask = batch.rl_mask
        normalizer = LossNormalizer.from_mask(rl_mask, self.max_response_tokens)
        expert_normalizer = None
        if bool(batch.is_expert.any()):
            expert_normalizer = LossNormalizer.from_mask(
                batch.action_mask[batch.is_expert], self.max_response_tokens
            )
        rows = self.rows_with_gradient(batch)
        self.skipped_rows = 0 if rows is None else batch.size - rows.numel()
        if rows is not None:
            batch = batch.select(rows)
        totals: dict[str, tuple[float, int]] = {}
        micros = distributed.micro_batches(
            batch,
            self.micro_batch_size,
            self.rank,
            self.world_size,
            self.max_tokens,
            balance=self.balance_batch,
        )
        for micro, padding in micros:
            if self.master is not None:
                self.master.accumulate()  # the previous micro-batch's gradient, into fp32
            metrics = self._micro_step(micro, normalizer, expert_normalizer, padding)
            for k, v in metrics.items() if not padding else ():
                total, count = totals.get(k, (0.0, 0))
                totals[k] = (total + v, count + 1)
        return distributed.gather_metrics(totals) if self.world_size > 1 else totals

    def rows_with_gradient(self, batch: TrainBatch) -> torch.Tensor | None:
        """The rows of ``batch`` whose loss has a gradient, when some have none; else None.

        Under a policy loss linear in the advantages (PPO, GSPO) with no KL or entropy
        loss, a row whose advantages are all zero (a GRPO group whose rewards tie)
        contributes exactly nothing to the gradient; its forward and backward passes
        are skipped. The normalizer still counts it, so the update is unchanged; the
        step's ratio and entropy metrics are then over the trained rows. When no row
        carries a gradient, the first one runs: the gradient is zero, and AdamW still
        applies its momentum and weight decay, as it would have.
        """
        algo = self.config.algorithm
        if (
            self.world_size > 1
            or batch.advantages is None
            or self.entropy_has_grad
            or algo.policy_loss_fn not in LINEAR_IN_ADVANTAGE
            or (batch.ref_logprobs is not None and algo.kl_loss_fn != NONE)
            or bool(batch.is_expert.any())
        ):
            return None
        live = ((batch.advantages != 0) & (batch.rl_mask > 0)).any(dim=1)
        if bool(live.all()):
            return None
        if not bool(live.any()):
            live[0] = True
        return live.nonzero().flatten()

    def _micro_step(
        self,
        micro: TrainBatch,
        normalizer: LossNormalizer,
        expert_normalizer: LossNormalizer | None,
        padding: bool = False,
    ) -> dict[str, float]:
        """``padding``: a data-parallel filler micro-batch; its gradient is multiplied by 0."""
        logprobs, entropy = forward_logprobs(
            self.model,
            micro,
            temperature=self.temperature,
            compute_entropy=True,
            entropy_grad=self.entropy_has_grad,
            compute_dtype=self.autocast_dtype,
        )
        rl_mask = micro.rl_mask
        # mix picks its rollout and expert rows itself; other losses see rollout rows only
        loss_mask = micro.action_mask if "is_expert" in self.policy_loss.inputs else rl_mask
        # only to losses that read it (mix_chord), so plugin losses keep the older signature
        step = {"global_step": self.global_step} if "global_step" in self.policy_loss.inputs else {}
        if "rollout_is_weights" in self.policy_loss.inputs:
            step["rollout_is_weights"] = micro.rollout_is_weights
        loss, metrics = self.policy_loss(
            logprobs,
            loss_mask,
            old_logprobs=micro.old_logprobs,
            advantages=micro.advantages,
            ref_logprobs=micro.ref_logprobs,
            is_expert=micro.is_expert,
            normalizer=normalizer,
            expert_normalizer=expert_normalizer,
            **step,
        )
        if micro.ref_logprobs is not None and self.config.algorithm.kl_loss_fn != NONE:
            kl_loss, kl_metrics = self.kl_loss.loss(
                logprobs,
                micro.ref_logprobs,
                rl_mask,
                self.loss_agg_mode,
                normalizer,
                old_logprobs=micro.old_logprobs,
            )
            loss = loss + kl_loss
            metrics.update(kl_metrics)
        if entropy is not None:
            if self.entropy_has_grad:
                ent_loss, ent_metrics = self.entropy_loss(
                    entropy, rl_mask, loss_agg_mode=self.loss_agg_mode, normalizer=normalizer
                )
                loss = loss + ent_loss
                metrics.update(ent_metrics)
            else:
                mask = micro.action_mask
                metrics["entropy"] = float(
                    (entropy.detach() * mask).sum() / mask.sum().clamp(min=1)
                )
        # FSDP averages gradients over the ranks, but each rank's loss is already its
        # share of the whole batch's: times world_size makes the average the sum
        (loss * (0.0 if padding else float(self.world_size))).backward()
        metrics["loss"] = float(loss.detach())
        return metrics

    def _optimizer_step(self) -> float:
        if self.master is not None:
            norm = self.master.step(self.optimizer, self.grad_clip)
            if not torch.isfinite(torch.tensor(norm)):
                self.logger.warning("non-finite gradient norm %s: skipping the update", norm)
            self.scheduler.step()
            return norm
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(
            params, self.grad_clip if self.grad_clip > 0 else float("inf")
        )
        if self.world_size > 1:
            norm = norm.full_tensor()  # the norm over every rank's shard
        if torch.isfinite(norm):
            self.optimizer.step()
        else:
            self.logger.warning("non-finite gradient norm %s: skipping the update", float(norm))
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    @staticmethod
    def _batch_metrics(batch: TrainBatch) -> dict[str, float]:
        lengths = batch.action_mask.sum(dim=1)
        metrics = {
            "response_length/mean": float(lengths.mean()),
            "batch/size": float(batch.size),
        }
        rollout = ~batch.is_expert
        if batch.advantages is not None and bool(rollout.any()):
            adv = batch.advantages[batch.rl_mask > 0]
            metrics["critic/rewards/mean"] = float(batch.rewards[rollout].mean())
            metrics["critic/advantages/mean"] = float(adv.mean()) if adv.numel() else 0.0
            metrics["critic/advantages/max"] = float(adv.max()) if adv.numel() else 0.0
        if bool(batch.is_expert.any()):
            metrics["batch/expert_size"] = float(batch.is_expert.sum())
        return metrics

    # ------------------------------------------------------------------ weights
    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        """The policy's parameters in the rollout engine's dtype (halves the transfer);
        with LoRA the adapter's tensors only."""
        if self.lora is not None:
            return lora.adapter_state_dict(self.model)
        if self.master is not None:
            # the parameters are already bf16: views, valid until the next update (every
            # consumer copies or serialises them at once)
            return {k: v.detach() for k, v in self.model.state_dict().items()}
        state = (
            distributed.full_state_dict(self.model)
            if self.world_size > 1
            else self.model.state_dict()
        )
        # copy=True: one copy whether or not the dtype changes (.to then .clone made two)
        return {k: v.detach().to(self.compute_dtype, copy=True) for k, v in state.items()}

    def export_hf(self, job_dir: Path, step: int) -> Path:
        """Write the policy as a Hugging Face model into ``global_step_<step>/actor/huggingface``.

        The next stage of a multi-stage run starts from this directory; ``trinity
        convert`` skips a step that already has it.
        """
        directory = ckpt.step_dir(job_dir, step) / "actor" / "huggingface"
        if self.world_size > 1:
            state = distributed.full_state_dict(self.model)  # every rank takes part
            if self.rank == 0:
                self._save_hf_config(directory)
                self.model.save_pretrained(directory, state_dict=state, safe_serialization=True)
            return directory
        self._save_hf_model(directory)
        self.logger.info("exported the policy of step %d to %s", step, directory)
        return directory

    def _save_hf_model(self, directory: Path) -> None:
        """Config, tokenizer and weights of a one-rank policy, loadable by
        ``AutoModelForCausalLM.from_pretrained(directory)``."""
        self._save_hf_config(directory)
        if self.lora is not None:
            lora.export_merged(self.model, directory)
        elif self.master is not None:
            # the fp32 masters, and a config that says float32 (save_pretrained writes the
            # parameters' dtype into it)
            self.model.save_pretrained(
                directory, state_dict=self._model_state(), safe_serialization=True
            )
            self.model.config.dtype = torch.float32
            self.model.config.save_pretrained(directory)
        else:
            self.model.save_pretrained(directory, safe_serialization=True)

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, job_dir: Path, step: int, keep: int | None = None) -> Path:
        """Model, optimizer and extra state of ``step``; with several ranks every rank
        calls this and writes its own shard files."""
        tt = self.config.trainer.trainer_config.trainer
        if tt.remove_previous_ckpt_in_save:  # veRL: it overrides max_*_ckpt_to_keep
            keep = 1
        if self.world_size > 1:
            return self._save_sharded_checkpoint(Path(job_dir), step, keep)
        save = self._checkpoint_contents("save_contents")
        if self.critic is not None:
            # before the actor: the actor's save moves the "latest" pointer
            self.critic.save(job_dir, step)
        path = ckpt.save_actor_checkpoint(
            job_dir,
            step,
            model_state=self._model_state(),
            optim_state=self.optimizer.state_dict() if "optimizer" in save else None,
            extra_state=self._rank_extra_state(step) if "extra" in save else None,
            hf_save=self._save_hf_model if "hf_model" in save else self._save_hf_config,
        )
        ckpt.write_json_atomic(Path(job_dir) / "trainer_meta.json", {"latest_iteration": step})
        ckpt.prune_checkpoints(job_dir, keep)
        if self.critic is not None:
            ckpt.prune_critics(
                job_dir, 1 if tt.remove_previous_ckpt_in_save else tt.max_critic_ckpt_to_keep
            )
        self.logger.info("saved checkpoint %s", path)
        return path

    def _checkpoint_contents(self, which: str) -> set[str]:
        """``actor.checkpoint.save_contents`` or ``load_contents``. The model's shards are
        always written (the explorer resumes from them); optimizer and extra state only
        when listed; ``hf_model`` adds the weights to ``huggingface/``, and loaded, reads
        the policy from there instead of the shards."""
        contents = self.config.trainer.trainer_config.actor_rollout_ref.actor.checkpoint
        return set(getattr(contents, which))

    def save_state_dict(self, job_dir: Path, step: int) -> Path:
        """Weights only, for checkpoint-based synchronisation: the full state in one
        file (``model_world_size_1_rank_0.pt``) however many ranks train."""
        weights = self.weights_for_sync()
        if self.rank > 0:
            return ckpt.step_dir(job_dir, step) / "actor"
        return ckpt.save_actor_checkpoint(
            job_dir,
            step,
            model_state=weights,
            optim_state=None,
            extra_state=None,
            pointer=ckpt.LATEST_STATE_DICT,
        )

    def load_checkpoint(self, job_dir: Path, step: int | None = None) -> int:
        """Resume from the full checkpoint of ``step`` (None: the newest); returns its step
        (0 when there is none)."""
        step = step or ckpt.read_latest(job_dir)
        if not step:
            return 0
        if self.world_size > 1:
            return self._load_sharded_checkpoint(Path(job_dir), step)
        load = self._checkpoint_contents("load_contents")
        shard = self._shard_loader(Path(job_dir), step, load)
        state = self._saved_weights(Path(job_dir), step, load, shard)
        if state is not None:
            if self.lora is not None:
                lora.load_adapter_state(self.model, state)
            elif self.master is not None:
                self.master.load_state_dict(self.model, state)
            else:
                self.model.load_state_dict(state)
        if "optimizer" in load:
            self.optimizer.load_state_dict(shard("optim"))
        self._load_extra_state(shard("extra_state") if "extra" in load else None)
        if self.critic is not None:
            self.critic.load(job_dir, step)
        self.global_step = step
        self.logger.info("resumed trainer from step %d", step)
        return self.global_step

    # ------------------------------------------------------------------ data parallel
    def _ref_logprobs(self, batch: TrainBatch) -> torch.Tensor:
        """(B, R) reference log-probs, in micro-batches of
        ``ref.log_prob_micro_batch_size_per_gpu`` rows (or packed)."""
        return self._logprobs(self.ref_model, batch, self.ref_micro_batch_size, self.ref_max_tokens)

    def _logprobs(
        self, model: torch.nn.Module, batch: TrainBatch, micro_size: int, max_tokens: int | None
    ) -> torch.Tensor:
        """(B, R) log-probs of ``model`` without grad; with several ranks each computes
        its own rows and the ranks exchange them, except for the sharded policy, whose
        forward passes every rank must join: each then computes every row."""
        if model is self.model and self.world_size > 1:
            micros = batch.split(micro_size, max_tokens)
            return torch.cat(
                [
                    forward_logprobs(
                        model, m, temperature=self.temperature, compute_dtype=self.autocast_dtype
                    )[0]
                    for m in micros
                ]
            )
        rows = distributed.rows_of_rank(batch, self.rank, self.world_size, self.balance_batch)
        part = batch if self.world_size == 1 else batch.select(rows)
        local = batch.old_logprobs[rows]
        if part.size:
            micros = part.split(micro_size, max_tokens)
            local = torch.cat(
                [
                    forward_logprobs(
                        model,
                        micro,
                        temperature=self.temperature,
                        compute_dtype=self.autocast_dtype,
                    )[0]
                    for micro in micros
                ]
            )
        if self.world_size == 1:
            return local
        return distributed.all_reduce_rows(batch.old_logprobs, rows, local)

    def _shard_loader(self, job_dir: Path, step: int, load: set[str]):
        """kind -> this rank's shard of ``step``; a part ``load_contents`` lists but the
        checkpoint lacks (``save_contents`` left it out) fails naming both keys."""

        def shard(kind: str):
            path = ckpt.step_dir(job_dir, step) / "actor"
            if not (path / ckpt.shard_name(kind, self.world_size, self.rank)).exists():
                part = {"optim": "optimizer", "extra_state": "extra"}.get(kind, kind)
                raise TrainerSetupError(
                    f"checkpoint {path} holds no {part} state (actor.checkpoint.save_contents "
                    f"left it out); drop '{part}' from actor.checkpoint.load_contents to resume "
                    "without it"
                )
            return ckpt.load_actor_shard(job_dir, step, kind, self.world_size, self.rank)

        return shard

    def _saved_weights(self, job_dir: Path, step: int, load: set[str], shard) -> dict | None:
        """The policy's weights ``load_contents`` names: its ``model`` shard, or with
        ``hf_model`` the full weights of ``huggingface/`` (tied names filled in); None
        when it names neither."""
        if "hf_model" not in load:
            return shard("model") if "model" in load else None
        path = ckpt.step_dir(job_dir, step) / "actor" / "huggingface"
        if "model" in load:
            raise TrainerSetupError(
                "actor.checkpoint.load_contents lists both 'model' and 'hf_model': name one "
                f"source of the policy's weights (the shards or {path})"
            )
        if self.lora is not None:
            raise TrainerSetupError(
                f"{path} holds the merged weights of a LoRA policy, not its adapter: load "
                "'model' (actor.checkpoint.load_contents) to resume LoRA training"
            )
        state = ckpt.load_hf_weights(job_dir, step)
        if state is None:
            raise TrainerSetupError(
                f"checkpoint {path} holds no weights (actor.checkpoint.save_contents left "
                "out hf_model); load 'model' from actor.checkpoint.load_contents instead"
            )
        return _with_tied_names(self.model, state)

    def _load_extra_state(self, extra: dict[str, Any] | None) -> None:
        """LR schedule and RNG states; without them (``extra`` not loaded) the schedule
        starts again and the generators keep their state."""
        if extra is None:
            return
        self.scheduler.load_state_dict(extra["lr_scheduler"])
        torch.set_rng_state(extra["torch_rng"])
        state = random.getstate()
        random.setstate((state[0], tuple(extra["python_rng"]), state[2]))

    def _rank_extra_state(self, step: int) -> dict[str, Any]:
        return {
            "global_step": step,
            "lr_scheduler": self.scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": list(random.getstate()[1]),
        }

    def _save_sharded_checkpoint(self, job_dir: Path, step: int, keep: int | None) -> Path:
        """Rank 0 opens a staging directory, every rank writes its shards into it (in the
        turns ``trainer.save_strategy`` allows), and rank 0 renames it into place once all
        have (a shared filesystem is assumed)."""
        import torch.distributed as dist

        holder = [ckpt.begin_checkpoint(job_dir, step) if self.rank == 0 else None]
        dist.broadcast_object_list(holder, src=0)
        staging = Path(holder[0])
        save = self._checkpoint_contents("save_contents")
        model_state = distributed.to_local(self.model.state_dict())
        optim_state = (
            distributed.to_local(self.optimizer.state_dict()) if "optimizer" in save else None
        )
        extra = self._rank_extra_state(step) if "extra" in save else None
        # hf_model: the full weights, gathered by every rank, written by rank 0
        full = distributed.full_state_dict(self.model) if "hf_model" in save else None

        def hf_save(directory: Path) -> None:
            self._save_hf_config(directory)
            if full is not None:
                self.model.save_pretrained(directory, state_dict=full, safe_serialization=True)

        interval: list[float] = []

        def write() -> None:
            interval.append(time.time())
            ckpt.write_rank_shards(
                staging, self.world_size, self.rank, model_state, optim_state, extra
            )
            interval.append(time.time())

        strategy = self.config.trainer.save_strategy
        turn, turns = distributed.in_turns(strategy, write)  # ends with a barrier
        self.logger.info(
            "rank %d wrote its checkpoint shards from %.6f to %.6f (turn %d of %d, "
            "save_strategy %s)",
            self.rank,
            *interval,
            turn + 1,
            turns,
            strategy,
        )
        path = ckpt.step_dir(job_dir, step) / "actor"
        if self.rank == 0:
            ckpt.commit_checkpoint(job_dir, step, staging, self.world_size, hf_save=hf_save)
            ckpt.write_json_atomic(job_dir / "trainer_meta.json", {"latest_iteration": step})
            ckpt.prune_checkpoints(job_dir, keep)
            self.logger.info("saved checkpoint %s (%d ranks)", path, self.world_size)
        dist.barrier()  # the checkpoint is complete when any rank returns
        return path

    def _load_sharded_checkpoint(self, job_dir: Path, step: int) -> int:
        saved = ckpt.checkpoint_world_size(job_dir, step)
        if saved != self.world_size:
            raise TrainerSetupError(
                f"checkpoint {ckpt.step_dir(job_dir, step)} was written by {saved} trainer rank(s); "
                f"resume it with {saved} (this trainer has {self.world_size}) or start from its "
                "Hugging Face export (trinity convert)"
            )

        load = self._checkpoint_contents("load_contents")
        shard = self._shard_loader(job_dir, step, load)
        state = self._saved_weights(job_dir, step, load, shard)
        if state is not None:
            distributed.load_model_state(self.model, state, full="hf_model" in load)
        if "optimizer" in load:
            distributed.load_local_optimizer_state(self.optimizer, self.model, shard("optim"))
        self._load_extra_state(shard("extra_state") if "extra" in load else None)
        self.global_step = step
        self.logger.info("resumed trainer rank %d from step %d", self.rank, step)
        return self.global_step

    def _model_state(self) -> dict[str, torch.Tensor]:
        """What a checkpoint keeps of the policy: all weights (the fp32 masters when the
        parameters are bf16), or with LoRA the adapter."""
        if self.lora is not None:
            return lora.adapter_state_dict(self.model)
        if self.master is not None:
            return self.master.state_dict(self.model)
        return self.model.state_dict()

    def _save_hf_config(self, directory: Path) -> None:
        if self.lora is not None:  # the adapter in peft's format beside huggingface/
            lora.save_adapter(self.model, directory.parent / lora.ADAPTER_DIR)
        directory.mkdir(parents=True, exist_ok=True)
        self.model.config.save_pretrained(directory)
        if self.model.generation_config is not None:
            self.model.generation_config.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    def extra_info(self) -> dict[str, Any]:
        return {"global_step": self.global_step}
