"""The trainer: turns batches of experiences into policy updates.

``train_step`` reads top to bottom: collate -> reference log-probs -> rewards and KL
penalty -> advantages -> for each PPO epoch and mini-batch: micro-batch forward,
loss, backward -> clip, step. The maths lives in ``trinity.algorithm``; this module
only wires it to a model and an optimizer.
"""

from __future__ import annotations

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
from trinity.config import Config
from trinity.trainer import checkpoint as ckpt
from trinity.trainer.actor import forward_logprobs
from trinity.trainer.batch import TrainBatch, collate
from trinity.trainer.optim import build_optimizer
from trinity.types import Experience

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


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


class Trainer:
    """Owns the actor (and reference) model, its optimizer, and its checkpoints."""

    def __init__(
        self,
        config: Config,
        *,
        model_dir: str | Path,
        total_steps: int,
        logger: logging.Logger | None = None,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = config
        self.logger = logger or logging.getLogger("trinity.trainer")
        self.model_dir = Path(model_dir)
        self.total_steps = total_steps
        algo = config.algorithm
        actor_cfg = config.trainer.trainer_config.actor_rollout_ref.actor
        torch.manual_seed(config.seed)
        random.seed(config.seed)

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.pad_token_id = self.tokenizer.pad_token_id
        if self.pad_token_id is None:
            self.pad_token_id = self.tokenizer.eos_token_id
        self.compute_dtype = compute_dtype(config.model.dtype)
        # fp32 master weights; the forward runs under bf16 autocast when model.dtype says so
        self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
        self.model.train()
        if config.trainer.trainer_config.actor_rollout_ref.model.enable_gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
            self.model.config.use_cache = False

        self.policy_loss = build(POLICY_LOSS_FN, algo.policy_loss_fn, algo.policy_loss_fn_args)
        self.advantage_fn = build(ADVANTAGE_FN, algo.advantage_fn, algo.advantage_fn_args)
        self.kl_loss = build(KL_FN, algo.kl_loss_fn, algo.kl_loss_fn_args)
        self.kl_penalty = build(KL_FN, algo.kl_penalty_fn, algo.kl_penalty_fn_args)
        self.entropy_loss = build(ENTROPY_LOSS_FN, algo.entropy_loss_fn, algo.entropy_loss_fn_args)
        self.loss_agg_mode = algo.loss_agg_mode
        self.entropy_has_grad = algo.entropy_loss_fn != "none" and float(
            getattr(self.entropy_loss.args, "entropy_coef", 0.0)
        ) != 0.0
        self.ref_model = None
        if algo.kl_loss_fn != "none" or algo.kl_penalty_fn != "none":
            self.ref_model = AutoModelForCausalLM.from_pretrained(
                self.model_dir, dtype=self.compute_dtype
            ).eval()
            self.ref_model.requires_grad_(False)

        opt = algo.optimizer
        self.optimizer, self.scheduler = build_optimizer(
            self.model.parameters(),
            lr=opt.lr,
            weight_decay=opt.weight_decay,
            betas=tuple(opt.betas),
            total_steps=total_steps,
            lr_warmup_steps=opt.lr_warmup_steps,
            lr_warmup_steps_ratio=opt.lr_warmup_steps_ratio,
            warmup_style=opt.warmup_style,
            min_lr_ratio=opt.min_lr_ratio,
        )
        self.micro_batch_size = max(1, int(actor_cfg.ppo_micro_batch_size_per_gpu))
        self.grad_clip = float(actor_cfg.grad_clip)
        self.ppo_epochs = max(1, int(actor_cfg.ppo_epochs))
        self.temperature = float(config.buffer.explorer_input.taskset.rollout_args.temperature or 1.0) if config.buffer.explorer_input.taskset else 1.0
        self.max_response_tokens = config.model.max_response_tokens
        self.global_step = 0

    # ------------------------------------------------------------------ training
    def train_step(self, experiences: list[Experience]) -> dict[str, float]:
        """One policy update on ``experiences`` (a full train batch); returns metrics."""
        start = time.perf_counter()
        batch = collate(experiences, self.pad_token_id)
        metrics: dict[str, float] = {}
        if self.ref_model is not None:
            with torch.no_grad():
                batch.ref_logprobs, _ = forward_logprobs(
                    self.ref_model, batch, temperature=self.temperature
                )
        rewards = token_level_rewards(batch)
        if batch.ref_logprobs is not None:
            rewards, kl_metrics = self.kl_penalty.apply_penalty(
                rewards, batch.old_logprobs, batch.ref_logprobs, batch.action_mask
            )
            metrics.update({f"critic/{k}": v for k, v in kl_metrics.items()})
        batch.advantages, batch.returns = self.advantage_fn(
            AdvantageInputs(
                token_level_rewards=rewards,
                action_mask=batch.action_mask,
                group_ids=batch.group_ids,
            )
        )
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        grad_norms = []
        for _ in range(self.ppo_epochs):
            # the whole train batch is one mini-batch: one optimizer step per epoch
            normalizer = LossNormalizer.from_mask(batch.action_mask, self.max_response_tokens)
            for micro in batch.split(self.micro_batch_size):
                for k, v in self._micro_step(micro, normalizer).items():
                    sums[k] += v
                    counts[k] += 1
            grad_norms.append(self._optimizer_step())
        for k, v in sums.items():
            # loss shares add up to the mini-batch loss; ratios are averaged
            value = v / self.ppo_epochs if "loss" in k else v / counts[k]
            metrics[f"actor/{k}"] = value
        self.global_step += 1
        metrics.update(self._batch_metrics(batch))
        metrics["actor/grad_norm"] = float(sum(grad_norms) / len(grad_norms))
        metrics["actor/lr"] = float(self.scheduler.get_last_lr()[0])
        metrics["time/train_step"] = time.perf_counter() - start
        return metrics

    def _micro_step(self, micro: TrainBatch, normalizer: LossNormalizer) -> dict[str, float]:
        logprobs, entropy = forward_logprobs(
            self.model,
            micro,
            temperature=self.temperature,
            compute_entropy=True,
            entropy_grad=self.entropy_has_grad,
            compute_dtype=self.compute_dtype,
        )
        loss, metrics = self.policy_loss(
            logprobs,
            micro.action_mask,
            old_logprobs=micro.old_logprobs,
            advantages=micro.advantages,
            ref_logprobs=micro.ref_logprobs,
            normalizer=normalizer,
        )
        if micro.ref_logprobs is not None:
            kl_loss, kl_metrics = self.kl_loss.loss(
                logprobs, micro.ref_logprobs, micro.action_mask, self.loss_agg_mode, normalizer
            )
            loss = loss + kl_loss
            metrics.update(kl_metrics)
        if entropy is not None:
            if self.entropy_has_grad:
                ent_loss, ent_metrics = self.entropy_loss(
                    entropy, micro.action_mask, loss_agg_mode=self.loss_agg_mode, normalizer=normalizer
                )
                loss = loss + ent_loss
                metrics.update(ent_metrics)
            else:
                mask = micro.action_mask
                metrics["entropy"] = float((entropy.detach() * mask).sum() / mask.sum().clamp(min=1))
        loss.backward()
        metrics["loss"] = float(loss.detach())
        return metrics

    def _optimizer_step(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip if self.grad_clip > 0 else float("inf"))
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
        adv = batch.advantages[batch.action_mask > 0]
        return {
            "critic/rewards/mean": float(batch.rewards.mean()),
            "critic/advantages/mean": float(adv.mean()) if adv.numel() else 0.0,
            "critic/advantages/max": float(adv.max()) if adv.numel() else 0.0,
            "response_length/mean": float(lengths.mean()),
            "batch/size": float(batch.size),
        }

    # ------------------------------------------------------------------ weights
    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        """The policy's parameters in the rollout engine's dtype (halves the transfer)."""
        return {
            k: v.detach().to(self.compute_dtype).clone()
            for k, v in self.model.state_dict().items()
        }

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, job_dir: Path, step: int, keep: int | None = None) -> Path:
        extra = {
            "global_step": step,
            "lr_scheduler": self.scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": list(random.getstate()[1]),
        }
        path = ckpt.save_actor_checkpoint(
            job_dir,
            step,
            model_state=self.model.state_dict(),
            optim_state=self.optimizer.state_dict(),
            extra_state=extra,
            hf_save=self._save_hf_config,
        )
        ckpt.write_json_atomic(Path(job_dir) / "trainer_meta.json", {"latest_iteration": step})
        ckpt.prune_checkpoints(job_dir, keep)
        self.logger.info("saved checkpoint %s", path)
        return path

    def save_state_dict(self, job_dir: Path, step: int) -> Path:
        """Weights only, for checkpoint-based synchronisation."""
        return ckpt.save_actor_checkpoint(
            job_dir,
            step,
            model_state=self.weights_for_sync(),
            optim_state=None,
            extra_state=None,
            pointer=ckpt.LATEST_STATE_DICT,
        )

    def load_checkpoint(self, job_dir: Path) -> int:
        """Resume from the newest full checkpoint; returns its step (0 when none)."""
        step = ckpt.read_latest(job_dir)
        if not step:
            return 0
        self.model.load_state_dict(ckpt.load_actor_shard(job_dir, step, "model"))
        self.optimizer.load_state_dict(ckpt.load_actor_shard(job_dir, step, "optim"))
        extra = ckpt.load_actor_shard(job_dir, step, "extra_state")
        self.scheduler.load_state_dict(extra["lr_scheduler"])
        torch.set_rng_state(extra["torch_rng"])
        state = random.getstate()
        random.setstate((state[0], tuple(extra["python_rng"]), state[2]))
        self.global_step = int(extra["global_step"])
        self.logger.info("resumed trainer from step %d", step)
        return self.global_step

    def _save_hf_config(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.model.config.save_pretrained(directory)
        if self.model.generation_config is not None:
            self.model.generation_config.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    def extra_info(self) -> dict[str, Any]:
        return {"global_step": self.global_step}
