"""Optimizer and learning-rate schedule of the actor (and critic).

The schedule is a multiplier on the base LR: a linear warm-up over
``lr_warmup_steps`` (or ``lr_warmup_steps_ratio * total_steps`` when steps is negative),
then constant, or a cosine or linear decay down to ``min_lr_ratio * lr`` at
``total_steps`` (``algorithm.optimizer.lr_scheduler_type``, formerly ``warmup_style``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from trinity.trainer.precision import MasterWeights


def warmup_steps(lr_warmup_steps: int, lr_warmup_steps_ratio: float, total_steps: int) -> int:
    if lr_warmup_steps is not None and lr_warmup_steps >= 0:
        return int(lr_warmup_steps)
    return int(max(0.0, lr_warmup_steps_ratio or 0.0) * max(total_steps, 0))


def lr_multiplier(
    step: int, *, warmup: int, total_steps: int, style: str, min_lr_ratio: float
) -> float:
    """LR factor for optimizer step ``step`` (0-based)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if style == "constant":
        return 1.0
    if style not in ("cosine", "linear"):
        raise ValueError(f"unknown lr_scheduler_type '{style}' (valid: constant, cosine, linear)")
    decay_steps = max(total_steps - warmup, 1)
    progress = min(max(step - warmup, 0) / decay_steps, 1.0)
    if style == "linear":
        decay = 1.0 - progress
    else:
        decay = 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr_ratio + (1.0 - min_lr_ratio) * decay


def _can_fuse(params: list[torch.nn.Parameter]) -> bool:
    """Whether the fused AdamW kernel takes these parameters: one kernel per tensor
    instead of a dozen element-wise passes, about 3x faster on the CPU."""
    return bool(params) and all(
        p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params
    )


def build_optimizer(
    params: Iterable[torch.nn.Parameter],
    *,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    total_steps: int,
    lr_warmup_steps: int = -1,
    lr_warmup_steps_ratio: float = 0.0,
    warmup_style: str = "constant",
    min_lr_ratio: float = 0.0,
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    trainable = [p for p in params if p.requires_grad]
    optimizer = torch.optim.AdamW(
        trainable, lr=lr, weight_decay=weight_decay, betas=betas, fused=_can_fuse(trainable)
    )
    warmup = warmup_steps(lr_warmup_steps, lr_warmup_steps_ratio, total_steps)
    style = warmup_style or "constant"
    min_ratio = min_lr_ratio or 0.0

    def factor(step: int) -> float:
        return lr_multiplier(
            step, warmup=warmup, total_steps=total_steps, style=style, min_lr_ratio=min_ratio
        )

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def optimizer_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    *,
    grad_clip: float,
    master: MasterWeights | None = None,
    sharded: bool = False,
    logger: logging.Logger,
) -> float:
    """Clip the accumulated gradient to ``grad_clip`` (<= 0: no clipping), step unless
    its norm is not finite, advance the schedule, clear the gradient; returns the norm.
    ``master``: bf16 parameters whose fp32 masters take the step; ``sharded``: FSDP
    parameters, whose norm is taken over every rank's shard."""
    if master is not None:
        norm = master.step(optimizer, grad_clip)
        if not torch.isfinite(torch.tensor(norm)):
            logger.warning("non-finite gradient norm %s: skipping the update", norm)
        scheduler.step()
        return norm
    params = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else float("inf"))
    if sharded:
        norm = norm.full_tensor()  # the norm over every rank's shard
    if torch.isfinite(norm):
        optimizer.step()
    else:
        logger.warning("non-finite gradient norm %s: skipping the update", float(norm))
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)
