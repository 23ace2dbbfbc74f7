"""Loading the trainer's models: the policy (optionally with a LoRA adapter) and the
frozen reference, both with the trainer's attention and fused layers.

Both load in float32 from the same directory with ``model.override_config`` applied as
the rollout engines apply it (``trinity/models/overrides.py``); the trainer then decides
their working precision (``trinity/trainer/precision.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trinity.models.overrides import model_config
from trinity.trainer import lora
from trinity.trainer.actor import use_grouped_attention
from trinity.trainer.critic import enable_checkpointing
from trinity.trainer.fused_layers import fuse_layers

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def compute_dtype(name: str) -> torch.dtype:
    return _DTYPES[name]


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
) -> torch.nn.Module:
    """The trainable policy in float32, in train mode; with ``lora_config`` a peft model
    whose only trainable parameters are the adapter's."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **overridden)
    model.train()
    use_grouped_attention(model)  # bf16 matmuls, grouped K/V: trainer/actor.py
    fuse_layers(model)  # bf16 RMS norm and SwiGLU in one pass: trainer/fused_layers.py
    if gradient_checkpointing:
        enable_checkpointing(model)
        model.config.use_cache = False
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
) -> torch.nn.Module:
    """The frozen reference: the policy's starting weights, in the policy's parameter
    ``dtype``, so both agree exactly at the start."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **overridden).eval()
    model.requires_grad_(False)
    use_grouped_attention(model)  # the actor's attention
    fuse_layers(model)  # and its fused layers
    if gradient_checkpointing:
        # no effect in eval mode, but the actor's forward then picks the same
        # attention kernel for both models (trinity/trainer/actor.py)
        enable_checkpointing(model)
    return model
