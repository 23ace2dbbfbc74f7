"""The trainer: turns batches of experiences into policy (and critic) updates.

``train_step`` reads top to bottom:

    prepare:  collate -> reference log-probs -> critic values -> token rewards
              (minus the KL penalty) -> advantages and returns
    critic:   value-loss update on the returns (PPO)
    actor:    for each PPO epoch: micro-batch forward, loss, backward (gradient
              accumulation) -> clip, step; skipped for the first ``critic_warmup`` steps

Every algorithm type runs through the same steps; its parts decide what each does (sft
and dpo have no advantages, only ppo has a critic, ...). The maths lives in
``trinity.algorithm``; this module only wires it to models and optimizers. Its
neighbours: ``model_setup`` (loading the policy and reference), ``parts`` (the
algorithm's parts), ``advantages``, ``logprobs`` (no-grad log-probs over ranks),
``actor_loss`` (a micro-batch's loss),
``actor_checkpoint`` (save and resume), ``export`` (weights out: sync and Hugging Face).
At about 450 lines this file is past the usual 400 on purpose: the ``Trainer``'s setup and
its whole step stay in one place, read top to bottom; everything else is delegated.
"""

from __future__ import annotations

import logging
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from trinity.algorithm.loss_agg import LossNormalizer
from trinity.algorithm.rollout_correction import rollout_is_weights
from trinity.config import Config, ExplorerInputConfig, trainer_settings
from trinity.config.algorithm_defaults import NONE
from trinity.trainer import actor_checkpoint, distributed, export
from trinity.trainer.actor import forward_logprobs
from trinity.trainer.actor_loss import actor_loss
from trinity.trainer.advantages import fill_advantages, token_level_rewards
from trinity.trainer.batch import TrainBatch, collate
from trinity.trainer.critic import Critic
from trinity.trainer.logprobs import batch_logprobs
from trinity.trainer.model_setup import (
    bf16_parameters,
    compute_dtype,
    load_policy,
    load_reference,
    overridden_config,
)
from trinity.trainer.optim import build_optimizer, optimizer_step
from trinity.trainer.parts import (
    LINEAR_IN_ADVANTAGE,
    TrainerSetupError,
    build_parts,
    policy_loss_args,
)
from trinity.trainer.precision import MasterWeights
from trinity.types import Experience
from trinity.utils.device import compute_device

# names other modules import from here; they live in the modules above
__all__ = [
    "LINEAR_IN_ADVANTAGE",
    "Trainer",
    "TrainerSetupError",
    "compute_dtype",
    "policy_loss_args",
    "token_level_rewards",
]


def _rollout_temperature(inputs: ExplorerInputConfig) -> float:
    """The first taskset's temperature: that of rows with neither their own nor a taskset's."""
    taskset = inputs.taskset
    if taskset is None or not taskset.rollout_args.temperature:
        return 1.0
    return float(taskset.rollout_args.temperature)


def _taskset_temperatures(inputs: ExplorerInputConfig) -> dict[str, float]:
    """Each training taskset's configured temperature, by name: the temperature of its
    rows written before experiences kept their own (greedy, 0, sampled logprobs at 1)."""
    storages = list(inputs.tasksets) or ([inputs.taskset] if inputs.taskset else [])
    return {s.name: float(s.rollout_args.temperature or 1.0) for s in storages}


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
        from transformers import AutoTokenizer

        self.config = config
        self.logger = logger or logging.getLogger("trinity.trainer")
        self.model_dir = Path(model_dir)
        self.total_steps = total_steps
        self.rank = rank_info.rank if rank_info else 0
        self.world_size = rank_info.world_size if rank_info else 1
        self.skipped_rows = 0  # rows of the last mini-batch left out of backward
        # (job dir, step, global_step) of the full checkpoint holding the current weights
        self.checkpointed_weights: tuple[Path, int, int] | None = None
        algo = config.algorithm
        settings = trainer_settings(config.trainer)
        policy = settings.policy
        torch.manual_seed(config.seed)
        random.seed(config.seed)

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.pad_token_id = self.tokenizer.pad_token_id
        if self.pad_token_id is None:
            self.pad_token_id = self.tokenizer.eos_token_id
        self.compute_dtype = compute_dtype(config.model.dtype)
        # cuda when the config asks for GPUs and Ray gave this process one, else the CPU;
        # batches are collated on the CPU and each micro-batch moves here
        self.device = compute_device(config.cluster)
        # loaded in fp32; with model.dtype bfloat16 on one rank without LoRA the parameters
        # become bf16 and the optimizer keeps fp32 masters (trinity/trainer/precision.py),
        # otherwise fp32 parameters run under bf16 autocast
        self.bf16_weights = bf16_parameters(
            self.compute_dtype,
            lora=bool(config.model.lora_configs),
            world_size=self.world_size,
            allowed=bf16_weights is not False,
        )
        self.autocast_dtype = None if self.bf16_weights else self.compute_dtype
        overridden = overridden_config(self.model_dir, policy.override_config)
        checkpointing = policy.gradient_checkpointing
        self.lora = config.model.lora_configs[0] if config.model.lora_configs else None
        self.model = load_policy(
            self.model_dir,
            overridden,
            gradient_checkpointing=checkpointing,
            lora_config=self.lora,
            device=self.device,
            freeze_vision_tower=policy.freeze_vision_tower,
        )

        parts = build_parts(algo, settings.rollout_correction)
        self.policy_loss = parts.policy_loss
        self.advantage_fn = parts.advantage_fn
        self.kl_loss = parts.kl_loss
        self.kl_penalty = parts.kl_penalty
        self.entropy_loss = parts.entropy_loss
        self.entropy_has_grad = parts.entropy_has_grad
        self.loss_agg_mode = algo.loss_agg_mode
        # rollout correction: bypass_mode false recomputes the old log-probs at each step,
        # as Trinity-RFT's algorithm.bypass_old_logprobs false does
        self.rollout_correction = settings.rollout_correction
        self.recompute_old_logprobs = not (
            self.rollout_correction.bypass_mode and algo.bypass_old_logprobs
        )

        self.ref_model = None
        if algo.use_reference:
            self.ref_model = load_reference(
                self.model_dir,
                overridden,
                dtype=self.compute_dtype if self.bf16_weights else torch.float32,
                gradient_checkpointing=checkpointing,
                device=self.device,
            )
        self.critic: Critic | None = None
        if algo.use_critic:
            self.critic = Critic(
                settings.critic,
                model_dir=critic_model_dir or self.model_dir,
                total_steps=total_steps,
                compute_dtype=self.compute_dtype,
                logger=self.logger,
                device=self.device,
            )
        self.critic_warmup = settings.loop.critic_warmup
        # data parallel: deal rows to ranks by token count (trainer/distributed.py)
        self.balance_batch = settings.loop.balance_batch

        if self.world_size > 1:
            if self.critic is not None or self.lora is not None:
                raise TrainerSetupError("a critic or LoRA needs a one-rank trainer")
            offload = distributed.offloads(policy.offload, self.device)
            distributed.shard_model(self.model, offload=offload)
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
        # max_tokens (use_dynamic_bsz): micro-batches packed to a token budget, not a row count
        self.micro_batch_size = policy.update.micro_batch_size
        self.max_tokens = policy.update.max_tokens
        self.ref_micro_batch_size = policy.ref_logprobs.micro_batch_size
        self.ref_max_tokens = policy.ref_logprobs.max_tokens
        # recomputed old log-probs (bypass_mode false)
        self.old_micro_batch_size = policy.old_logprobs.micro_batch_size
        self.old_max_tokens = policy.old_logprobs.max_tokens
        self.grad_clip = policy.grad_clip
        self.ppo_epochs = policy.epochs
        self.temperature = _rollout_temperature(config.buffer.explorer_input)
        self.taskset_temperatures = _taskset_temperatures(config.buffer.explorer_input)
        self.max_response_tokens = config.model.max_response_tokens
        self.global_step = 0

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
        # read before from a replay buffer (the priority queue marks each read)
        metrics["batch/replayed"] = float(sum(e.info.get("use_count", 0) > 0 for e in experiences))
        metrics["actor/lr"] = float(self.scheduler.get_last_lr()[0])
        metrics["time/train_step"] = time.perf_counter() - start
        return metrics

    @torch.no_grad()
    def prepare(self, experiences: list[Experience]) -> tuple[TrainBatch, dict[str, float]]:
        """Collate ``experiences`` and fill reference log-probs, values and advantages."""
        batch = collate(experiences, self.pad_token_id, self.temperature, self.taskset_temperatures)
        metrics: dict[str, float] = {}
        if self.recompute_old_logprobs:
            metrics.update(self._correct_rollout(batch))
        if self.ref_model is not None:
            # in micro-batches of ref.log_prob_micro_batch_size_per_gpu rows (or packed)
            batch.ref_logprobs = self._logprobs(
                self.ref_model, batch, self.ref_micro_batch_size, self.ref_max_tokens
            )
        if self.critic is not None:
            batch.values = self.critic.values(batch)
        if self.advantage_fn is not None:
            metrics.update(fill_advantages(batch, self.advantage_fn, self.kl_penalty))
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

    def _logprobs(
        self, model: torch.nn.Module, batch: TrainBatch, micro_size: int, max_tokens: int | None
    ) -> torch.Tensor:
        """(B, R) log-probs of ``model`` without grad, over the ranks (trainer/logprobs.py)."""
        return batch_logprobs(
            model,
            batch,
            micro_size,
            max_tokens,
            compute_dtype=self.autocast_dtype,
            rank=self.rank,
            world_size=self.world_size,
            balance=self.balance_batch,
            every_row=model is self.model and self.world_size > 1,
            device=self.device,
        )

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
        micro = micro.to(self.device)
        logprobs, entropy = forward_logprobs(
            self.model,
            micro,
            compute_entropy=True,
            entropy_grad=self.entropy_has_grad,
            compute_dtype=self.autocast_dtype,
        )
        uses_kl = micro.ref_logprobs is not None and self.config.algorithm.kl_loss_fn != NONE
        loss, metrics = actor_loss(
            micro,
            logprobs,
            entropy,
            normalizer,
            expert_normalizer,
            policy_loss=self.policy_loss,
            kl_loss=self.kl_loss if uses_kl else None,
            entropy_loss=self.entropy_loss if self.entropy_has_grad else None,
            loss_agg_mode=self.loss_agg_mode,
            global_step=self.global_step,
        )
        # FSDP averages gradients over the ranks, but each rank's loss is already its
        # share of the whole batch's: times world_size makes the average the sum
        (loss * (0.0 if padding else float(self.world_size))).backward()
        metrics["loss"] = float(loss.detach())
        return metrics

    def _optimizer_step(self) -> float:
        return optimizer_step(
            self.model,
            self.optimizer,
            self.scheduler,
            grad_clip=self.grad_clip,
            master=self.master,
            sharded=self.world_size > 1,
            logger=self.logger,
        )

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

    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        """The policy's parameters in the rollout engine's dtype (trainer/export.py)."""
        return export.weights_for_sync(self)

    def export_hf(self, job_dir: Path, step: int) -> Path:
        """The policy as a Hugging Face model in ``global_step_<step>/actor/huggingface``."""
        return export.export_hf(self, job_dir, step)

    def save_checkpoint(self, job_dir: Path, step: int, keep: int | None = None) -> Path:
        """Model, optimizer and extra state of ``step`` (trainer/actor_checkpoint.py); with
        several ranks every rank calls this and writes its own shard files."""
        return actor_checkpoint.save_checkpoint(self, job_dir, step, keep)

    def save_state_dict(self, job_dir: Path, step: int) -> Path:
        """Weights only, for checkpoint-based synchronisation."""
        return actor_checkpoint.save_state_dict(self, job_dir, step)

    def load_checkpoint(self, job_dir: Path, step: int | None = None) -> int:
        """Resume from the full checkpoint of ``step`` (None: the newest); returns its step
        (0 when there is none)."""
        return actor_checkpoint.load_checkpoint(self, job_dir, step)

    def _model_state(self) -> dict[str, torch.Tensor]:
        return export.model_state(self)

    def extra_info(self) -> dict[str, Any]:
        return {"global_step": self.global_step}
