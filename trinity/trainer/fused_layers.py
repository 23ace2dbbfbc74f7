"""Fused RMS norm and SwiGLU for the trainer's bf16 Llama-family models on the CPU.

In a bf16 train step transformers' ``LlamaRMSNorm`` is about ten elementwise ops forward
and more backward (upcast, square, mean, rsqrt, two products, casts), and the MLP's
``act_fn(gate) * up`` three ops forward and four backward, each a pass over a tensor of
the step's tokens x width. :func:`fuse_layers` points those modules' ``forward`` at
autograd functions that run the fused C kernels of :mod:`trinity.kernels` instead: one
pass forward and one backward, rounded where the bf16 ops round (the tests compare both
ways with the modules' own forward). Inputs that are not bf16 CPU tensors take the
module's own forward, so the fused forward is always safe to call.
"""

from __future__ import annotations

import logging

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from trinity import kernels

logger = logging.getLogger(__name__)

# modules whose forward is transformers' Llama RMS norm / SwiGLU MLP exactly (Gemma's
# norm scales by 1 + weight and is not among them)
RMS_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm")
MLPS = ("LlamaMLP", "Qwen2MLP", "Qwen3MLP", "MistralMLP")


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):  # type: ignore[override]
        lib = kernels.load()
        x = x.contiguous()
        y, rstd = lib.rms_norm_forward(x, weight, eps)  # type: ignore[union-attr]
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        x, weight, rstd = ctx.saved_tensors
        grad_x, grad_w = kernels.load().rms_norm_backward(  # type: ignore[union-attr]
            grad.contiguous(), x, weight, rstd
        )
        return grad_x, grad_w.to(weight.dtype), None


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):  # type: ignore[override]
        gate, up = gate.contiguous(), up.contiguous()
        ctx.save_for_backward(gate, up)
        return kernels.load().swiglu_forward(gate, up)  # type: ignore[union-attr]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        gate, up = ctx.saved_tensors
        return kernels.load().swiglu_backward(grad.contiguous(), gate, up)  # type: ignore[union-attr]


def _fusable(*tensors: torch.Tensor) -> bool:
    # plain tensors only: a DTensor (a sharded parameter) has no local data pointer
    return all(
        type(t) in (torch.Tensor, nn.Parameter)
        and t.dtype == torch.bfloat16
        and t.device.type == "cpu"
        for t in tensors
    )


def rms_norm(module: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """``module``'s forward (a Llama-style RMS norm) with the fused kernel when it applies."""
    if _fusable(hidden, module.weight):
        return _RMSNorm.apply(hidden, module.weight, float(module.variance_epsilon))
    return type(module).forward(module, hidden)


def swiglu_mlp(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module``'s forward (a Llama-style MLP) with the fused SwiGLU when it applies."""
    gate, up = module.gate_proj(x), module.up_proj(x)
    if _fusable(gate, up):
        return module.down_proj(_SwiGLU.apply(gate, up))
    return module.down_proj(module.act_fn(gate) * up)


def _silu(module: nn.Module) -> bool:
    act = getattr(module, "act_fn", None)
    return isinstance(act, nn.SiLU) or type(act).__name__ == "SiLUActivation"


def fuse_layers(model: nn.Module) -> int:
    """Route ``model``'s Llama-style RMS norms and SiLU MLPs through the fused kernels
    (bf16 CPU inputs; others keep the modules' own arithmetic). Returns the number of
    modules changed: 0 when the kernels are unavailable."""
    if kernels.load() is None:
        return 0
    changed = 0
    for module in model.modules():
        name = type(module).__name__
        if name in RMS_NORMS and hasattr(module, "variance_epsilon"):
            module.forward = rms_norm.__get__(module)
            changed += 1
        elif name in MLPS and _silu(module):
            module.forward = swiglu_mlp.__get__(module)
            changed += 1
    logger.debug("fused RMS norm / SwiGLU in %d modules", changed)
    return changed
