"""Loading the trainer's models: the policy (optionally with a LoRA adapter) and the
frozen reference, both with the trainer's attention and fused layers.

Both load in float32 from the same directory with ``model.override_config`` applied as
the rollout engines apply it (``trinity/rollout/overrides.py``); the trainer then decides
their working precision (``trinity/trainer/precision.py``).

``device`` is the trainer's compute device (``trinity.utils.device.compute_device``). On
the CPU the models get the trainer's grouped attention and fused CPU layers; on CUDA they
keep transformers' SDPA attention and modules (the fused layers are CPU kernels), and
bf16 is native there, so :func:`bf16_parameters` decides the same way on both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trinity.rollout.multimodal import model_class, vision_parameters
from trinity.rollout.overrides import model_config
from trinity.trainer import lora
from trinity.trainer.actor import use_grouped_attention
from trinity.trainer.critic import enable_checkpointing
from trinity.trainer.fused_layers import fuse_layers

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def compute_dtype(name: str) -> torch.dtype:
    return _DTYPES[name]


def bf16_parameters(dtype: torch.dtype, *, lora: bool, world_size: int, allowed: bool) -> bool:
    """Whether the policy's parameters are bf16 with fp32 masters in the optimizer
    (``model.dtype: bfloat16`` on one rank without LoRA, unless ``allowed`` is False);
    otherwise fp32 parameters run under bf16 autocast. The same rule on CPU and CUDA."""
    return dtype == torch.bfloat16 and not lora and world_size == 1 and allowed


def _cpu_paths(model: torch.nn.Module, device: torch.device | None) -> None:
    """The trainer's grouped attention and fused CPU layers, on the CPU only, for text
    models (a vision-language model keeps transformers' modules)."""
    if device is not None and device.type != "cpu":
        return
    if getattr(model.config, "vision_config", None) is not None:
        return
    use_grouped_attention(model)  # bf16 matmuls, grouped K/V: trainer/actor.py
    fuse_layers(model)  # bf16 RMS norm and SwiGLU in one pass: trainer/fused_layers.py


def overridden_config(model_dir: Path, override: dict[str, Any] | None) -> dict[str, Any]:
    """``from_pretrained`` keywords that apply ``model.override_config`` (none if unset)."""
    hf_config = model_config(model_dir, override)
    return {"config": hf_config} if hf_config is not None else {}


def load_policy(
    model_dir: Path,
    overridden: dict[str, Any],
    *,
    gradient_checkpointing: bool,
    lora_config: Any | None,
    device: torch.device | None = None,
    freeze_vision_tower: bool = False,
) -> torch.nn.Module:
    """The trainable policy in float32 on ``device`` (None: the CPU), in train mode; with
    ``lora_config`` a peft model whose only trainable parameters are the adapter's (on
    the language side only of a vision-language model); ``freeze_vision_tower`` keeps a
    vision-language model's vision encoder fixed."""
    model = model_class(model_dir).from_pretrained(model_dir, dtype=torch.float32, **overridden)
    if device is not None:
        model.to(device)
    model.train()
    _cpu_paths(model, device)
    if gradient_checkpointing:
        enable_checkpointing(model)
        model.config.use_cache = False
    if freeze_vision_tower:
        freeze_vision(model)
    if lora_config is not None:
        model = lora.wrap(model, lora_config)
        if gradient_checkpointing:
            model.enable_input_require_grads()
    return model


def load_reference(
    model_dir: Path,
    overridden: dict[str, Any],
    *,
    dtype: torch.dtype,
    gradient_checkpointing: bool,
    device: torch.device | None = None,
) -> torch.nn.Module:
    """The frozen reference on ``device`` (None: the CPU): the policy's starting weights,
    in the policy's parameter ``dtype``, so both agree exactly at the start."""
    model = model_class(model_dir).from_pretrained(model_dir, dtype=dtype, **overridden).eval()
    if device is not None:
        model.to(device)
    model.requires_grad_(False)
    _cpu_paths(model, device)  # the actor's attention and fused layers
    if gradient_checkpointing:
        # no effect in eval mode, but the actor's forward then picks the same
        # attention kernel for both models (trinity/trainer/actor.py)
        enable_checkpointing(model)
    return model


def freeze_vision(model: torch.nn.Module) -> int:
    """Stop gradients to a vision-language model's vision encoder (its parameters stay
    as loaded); returns how many parameters were frozen (0 for a text model)."""
    frozen = 0
    for _, param in vision_parameters(model):
        param.requires_grad_(False)
        frozen += param.numel()
    return frozen
