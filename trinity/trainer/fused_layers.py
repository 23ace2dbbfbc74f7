"""Fused RMS norm, SwiGLU and rotary embedding for the trainer's bf16 Llama-family
models on the CPU.

In a bf16 train step transformers' ``LlamaRMSNorm`` is about ten elementwise ops forward
and more backward (upcast, square, mean, rsqrt, two products, casts), the MLP's
``act_fn(gate) * up`` three ops forward and four backward, and ``apply_rotary_pos_emb``
eight forward (two products, two slices, a negation, a concatenation, a sum, for q and
for k) and more backward, where each slice's gradient is a zero-filled tensor and a copy.
Each op is a pass over a tensor of the step's tokens x width. :func:`fuse_layers` points
those modules' ``forward`` at autograd functions that run the fused C kernels of
:mod:`trinity.kernels` instead: one pass forward and one backward, rounded where the
bf16 ops round (the tests compare both ways with the modules' own forward). Inputs that
are not bf16 CPU tensors take the original code, so the fused functions are always safe
to call.

Only the given model changes: its attention layers get their own copy of transformers'
``forward`` that finds the fused ``apply_rotary_pos_emb`` among its globals; the modeling
module, its classes and any other model built in the process keep transformers' code.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from trinity import kernels

logger = logging.getLogger(__name__)

# modules whose forward is transformers' Llama RMS norm / SwiGLU MLP exactly (Gemma's
# norm scales by 1 + weight and is not among them)
RMS_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm")
MLPS = ("LlamaMLP", "Qwen2MLP", "Qwen3MLP", "MistralMLP")
# attention modules whose modeling module's apply_rotary_pos_emb(q, k, cos, sin,
# unsqueeze_dim=1) is q * cos + rotate_half(q) * sin (and the same for k)
ATTENTIONS = ("LlamaAttention", "Qwen2Attention", "Qwen3Attention", "MistralAttention")
_ROTARY_PARAMETERS = ["q", "k", "cos", "sin", "unsqueeze_dim"]


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


class _Rotary(torch.autograd.Function):
    """apply_rotary_pos_emb of q (B, H, T, D) and k (B, KV, T, D) with cos and sin
    (B|1, T, D); each gradient comes back in the layout of its input."""

    @staticmethod
    def forward(ctx, q, k, cos, sin):  # type: ignore[override]
        lib = kernels.load()
        ctx.save_for_backward(cos, sin)
        ctx.layouts = ((q.shape, q.stride()), (k.shape, k.stride()))
        return lib.rope(q, cos, sin), lib.rope(k, cos, sin)  # type: ignore[union-attr]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_q, grad_k):  # type: ignore[override]
        cos, sin = ctx.saved_tensors
        lib = kernels.load()
        grads = [
            None
            if grad is None
            else lib.rope(  # type: ignore[union-attr]
                grad if grad.stride(-1) == 1 else grad.contiguous(),
                cos,
                sin,
                backward=True,
                like=layout,
            )
            for grad, layout in zip((grad_q, grad_k), ctx.layouts, strict=True)
        ]
        return grads[0], grads[1], None, None


def _rotary_fits(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or not _fusable(q, k, cos, sin):
        return False
    batch, _, steps, dim = q.shape
    return (
        k.shape[0] == batch
        and tuple(k.shape[2:]) == (steps, dim)
        and cos.shape == sin.shape
        and cos.stride() == sin.stride()
        and cos.shape[0] in (1, batch)
        and tuple(cos.shape[1:]) == (steps, dim)
        and dim % 2 == 0
        and not (cos.requires_grad or sin.requires_grad)
        and all(t.stride(-1) == 1 for t in (q, k, cos))
    )


def fused_rotary(original: Callable) -> Callable:
    """``original`` (a modeling module's ``apply_rotary_pos_emb``) with the fused kernel
    for bf16 CPU inputs it fits; anything else goes to ``original``."""

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        if unsqueeze_dim == 1 and _rotary_fits(q, k, cos, sin):
            return _Rotary.apply(q, k, cos, sin)
        return original(q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb.fused_original = original  # type: ignore[attr-defined]
    return apply_rotary_pos_emb


def _holds(cell: types.CellType, value: object) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False


def _rebound(function: Callable, old: dict[str, Any], new: dict[str, Any]) -> Callable:
    """A copy of ``function`` that reads its globals from ``new`` where it read them from
    ``old`` (its modeling module's); a wrapper made with ``functools.wraps`` (such as
    transformers' ``deprecate_kwarg``) is copied around a copy of the function it wraps."""
    closure = function.__closure__
    inner = getattr(function, "__wrapped__", None)
    inner_copy = None
    if inner is not None and closure and any(_holds(cell, inner) for cell in closure):
        inner_copy = _rebound(inner, old, new)
        closure = tuple(
            types.CellType(inner_copy) if _holds(cell, inner) else cell for cell in closure
        )
    copy = types.FunctionType(
        function.__code__,
        new if function.__globals__ is old else function.__globals__,
        function.__name__,
        function.__defaults__,
        closure,
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    functools.update_wrapper(copy, function)
    # __wrapped__ leads to the copy of the wrapped function, or nowhere: never back to
    # transformers' original (update_wrapper points it at ``function``)
    if inner_copy is not None:
        copy.__wrapped__ = inner_copy  # type: ignore[attr-defined]
    elif inner is None:
        del copy.__wrapped__
    return copy


def _fused_attention_forward(cls: type, cache: dict[type, Callable | None]) -> Callable | None:
    """``cls.forward`` (an attention layer's) calling :func:`fused_rotary` of its modeling
    module's ``apply_rotary_pos_emb``; None when that function is missing or its signature
    is not the one the kernel implements. One copy per class and :func:`fuse_layers` call."""
    if cls not in cache:
        cache[cls] = None
        modeling = sys.modules.get(cls.__module__)
        original = getattr(modeling, "apply_rotary_pos_emb", None)
        if (
            original is not None
            and list(inspect.signature(original).parameters) == _ROTARY_PARAMETERS
        ):
            old = vars(modeling)
            new = {**old, "apply_rotary_pos_emb": fused_rotary(original)}
            cache[cls] = _rebound(cls.forward, old, new)
    return cache[cls]


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
    """Route ``model``'s Llama-style RMS norms, SiLU MLPs and rotary embeddings through
    the fused kernels (bf16 CPU inputs; others keep the modules' own arithmetic), by
    setting those modules' ``forward``: nothing outside ``model`` changes. Returns
    the number of modules changed (an attention layer counts when its family's rotary
    embedding is fused): 0 when the kernels are unavailable."""
    if kernels.load() is None:
        return 0
    changed = 0
    attention_forwards: dict[type, Callable | None] = {}
    for module in model.modules():
        name = type(module).__name__
        if name in RMS_NORMS and hasattr(module, "variance_epsilon"):
            module.forward = rms_norm.__get__(module)
            changed += 1
        elif name in MLPS and _silu(module):
            module.forward = swiglu_mlp.__get__(module)
            changed += 1
        elif name in ATTENTIONS:
            forward = _fused_attention_forward(type(module), attention_forwards)
            if forward is not None:
                module.forward = types.MethodType(forward, module)
                changed += 1
    logger.debug("fused RMS norm / SwiGLU / rotary embedding in %d modules", changed)
    return changed
