"""The critic of PPO: a value head on a copy of ``model.critic_model_path``.

The critic predicts V(s_t), the expected return from the state before response token
t. Its input is the same padded batch as the actor's; the value of response token j is
read from the hidden state at column P - 1 + j, the position whose logits predict it.
The head is a linear layer initialised to zero, so the first values are 0.

It is trained with its own optimizer (``trainer_config.critic.optim``) on the clipped
value loss (PPO, arXiv:1707.06347; the clip as in OpenAI baselines):

    v_clip = v_old + clip(v - v_old, -c, c)                c = critic.cliprange_value
    l_t    = 0.5 * max((v - G_t)^2, (v_clip - G_t)^2)      G = returns (GAE targets)

averaged over the valid tokens of the batch (token-mean); micro-batch losses add up to
the batch loss through the batch's ``LossNormalizer``, as the actor's do.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from trinity.algorithm.loss_agg import LossNormalizer, aggregate_loss
from trinity.algorithm.utils import masked_mean
from trinity.config.trainer_settings import CriticSettings
from trinity.rollout.overrides import model_config
from trinity.trainer import checkpoint as ckpt
from trinity.trainer.actor import autocast_context
from trinity.trainer.batch import TrainBatch
from trinity.trainer.optim import build_optimizer


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float,
    normalizer: LossNormalizer | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped value loss of the module docstring.

    Args:
        values: (B, R) V(s_t) of the critic being trained, differentiable.
        old_values: (B, R) V(s_t) before this step's update (the GAE baseline).
        returns: (B, R) regression targets.
        mask: (B, R) 1 on the valid response tokens.
        cliprange_value: c, how far a value may move from ``old_values`` unclipped.
        normalizer: counts of the whole batch (micro-batch losses then add up).

    Returns:
        (loss, metrics) with ``vf_loss`` (this micro-batch's share) and ``vf_clipfrac``.
    """
    clipped = old_values + (values - old_values).clamp(-cliprange_value, cliprange_value)
    unclipped_loss = (values - returns).square()
    clipped_loss = (clipped - returns).square()
    losses = 0.5 * torch.maximum(unclipped_loss, clipped_loss)
    loss = aggregate_loss(losses, mask, "token-mean", normalizer)
    with torch.no_grad():
        metrics = {
            "vf_loss": loss.item(),
            "vf_clipfrac": masked_mean((clipped_loss > unclipped_loss).float(), mask).item(),
        }
    return loss, metrics


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Recompute activations in backward (the method's name changed in transformers 5)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    (enable or model.gradient_checkpointing_enable)()


class ValueModel(torch.nn.Module):
    """A transformer backbone plus a scalar head: (B, T) token ids -> (B, T) values."""

    def __init__(self, backbone: torch.nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_pretrained(
        cls, model_dir: str | Path, override_config: Mapping[str, Any] | None = None
    ) -> ValueModel:
        """The backbone of ``model_dir`` (its config with ``override_config`` applied)."""
        from transformers import AutoModel

        config = model_config(model_dir, override_config)
        overridden = {"config": config} if config is not None else {}
        backbone = AutoModel.from_pretrained(model_dir, dtype=torch.float32, **overridden)
        return cls(backbone, int(backbone.config.hidden_size))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
    ) -> torch.Tensor:
        hidden = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        ).last_hidden_state
        return self.value_head(hidden).squeeze(-1).float()


def response_values(model: ValueModel, batch: TrainBatch) -> torch.Tensor:
    """(B, R) V(s_t) of every response position of ``batch``."""
    values = model(batch.input_ids, batch.attention_mask, batch.position_ids)
    start = batch.prompt_width - 1
    return values[:, start : start + batch.response_width]


class Critic:
    """The value model, its optimizer, and its update on a train batch."""

    def __init__(
        self,
        cfg: CriticSettings,
        *,
        model_dir: str | Path,
        total_steps: int,
        compute_dtype: torch.dtype,
        logger: logging.Logger | None = None,
        device: torch.device | None = None,
    ) -> None:
        """``device``: where the value model computes (None: the CPU); batches stay
        where they are and each micro-batch is moved there."""
        self.logger = logger or logging.getLogger("trinity.trainer")
        self.compute_dtype = compute_dtype
        self.device = device or torch.device("cpu")
        self.model = ValueModel.from_pretrained(model_dir, cfg.override_config)
        self.model.to(self.device)
        self.model.train()
        if cfg.gradient_checkpointing:
            enable_checkpointing(self.model.backbone)
        opt = cfg.optimizer
        self.optimizer, self.scheduler = build_optimizer(
            self.model.parameters(),
            lr=opt.lr,
            weight_decay=opt.weight_decay,
            betas=tuple(opt.betas),
            total_steps=opt.total_training_steps if opt.total_training_steps > 0 else total_steps,
            lr_warmup_steps=opt.lr_warmup_steps,
            lr_warmup_steps_ratio=opt.lr_warmup_steps_ratio,
            warmup_style=opt.lr_scheduler_type or opt.warmup_style,
            min_lr_ratio=opt.min_lr_ratio,
        )
        self.cliprange_value = float(cfg.cliprange_value)
        self.grad_clip = float(cfg.grad_clip)
        self.micro_batch_size = cfg.update.micro_batch_size
        self.forward_micro_batch_size = cfg.values.micro_batch_size
        self.ppo_epochs = cfg.epochs
        # max_tokens (use_dynamic_bsz): micro-batches packed to a token budget, not a row count
        self.max_tokens = cfg.update.max_tokens
        self.forward_max_tokens = cfg.values.max_tokens

    @torch.no_grad()
    def values(self, batch: TrainBatch) -> torch.Tensor:
        """(B, R) values of ``batch`` under the current critic, zero on masked tokens."""
        self.model.eval()
        parts = []
        for micro in batch.split(self.forward_micro_batch_size, self.forward_max_tokens):
            with autocast_context(self.compute_dtype, self.device.type):
                values = response_values(self.model, micro.to(self.device))
            parts.append(values.to(batch.action_mask.device))
        self.model.train()
        return torch.cat(parts) * batch.action_mask

    def update(self, batch: TrainBatch, mask: torch.Tensor) -> dict[str, float]:
        """Fit ``batch.returns`` on the tokens of ``mask`` (B, R); returns ``critic/*`` metrics."""
        if batch.values is None or batch.returns is None:
            raise ValueError("the critic update needs batch.values and batch.returns")
        sums = {"vf_loss": 0.0, "vf_clipfrac": 0.0}
        micro_count = 0
        norms = []
        for _ in range(self.ppo_epochs):
            normalizer = LossNormalizer.from_mask(mask)
            for index in batch.micro_slices(self.micro_batch_size, self.max_tokens):
                micro = batch.select(index).to(self.device)
                with autocast_context(self.compute_dtype, self.device.type):
                    predicted = response_values(self.model, micro)
                loss, metrics = value_loss(
                    predicted,
                    micro.values,
                    micro.returns,
                    mask[index].to(self.device),
                    self.cliprange_value,
                    normalizer,
                )
                loss.backward()
                sums["vf_loss"] += metrics["vf_loss"]
                sums["vf_clipfrac"] += metrics["vf_clipfrac"]
                micro_count += 1
            norms.append(self._step())
        valid = batch.values[mask > 0]
        return {
            "critic/vf_loss": sums["vf_loss"] / self.ppo_epochs,
            "critic/vf_clipfrac": sums["vf_clipfrac"] / max(micro_count, 1),
            "critic/vpred_mean": float(valid.mean()) if valid.numel() else 0.0,
            "critic/grad_norm": float(sum(norms) / len(norms)),
            "critic/lr": float(self.scheduler.get_last_lr()[0]),
        }

    def _step(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        limit = self.grad_clip if self.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, limit)
        if torch.isfinite(norm):
            self.optimizer.step()
        else:
            self.logger.warning("critic: non-finite gradient norm %s, update skipped", float(norm))
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    # ------------------------------------------------------------------ checkpoints
    def save(self, job_dir: Path, step: int) -> Path:
        """Write ``global_step_<step>/critic`` (model, optimizer, schedule) atomically."""
        final = ckpt.step_dir(job_dir, step) / "critic"
        tmp = final.with_name(".critic.tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        # on the CPU, so the checkpoint loads on either device
        torch.save(ckpt.on_cpu(self.model.state_dict()), tmp / ckpt.shard_name("model", 1, 0))
        torch.save(ckpt.on_cpu(self.optimizer.state_dict()), tmp / ckpt.shard_name("optim", 1, 0))
        extra = {"lr_scheduler": self.scheduler.state_dict()}
        torch.save(extra, tmp / ckpt.shard_name("extra_state", 1, 0))
        ckpt.replace_dir(tmp, final)  # fsynced, swapped in whole
        return final

    def load(self, job_dir: Path, step: int) -> None:
        directory = ckpt.step_dir(job_dir, step) / "critic"

        def shard(kind: str):
            path = directory / ckpt.shard_name(kind, 1, 0)
            return torch.load(path, map_location="cpu", weights_only=True)

        self.model.load_state_dict(shard("model"))
        self.optimizer.load_state_dict(shard("optim"))
        self.scheduler.load_state_dict(shard("extra_state")["lr_scheduler"])
