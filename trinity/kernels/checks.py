"""Argument checks of the kernel wrappers.

The kernels read raw pointers, so every wrapper checks devices, dtypes, shapes, strides
and index ranges before the call and raises ValueError naming the argument. These are
real checks, not ``assert``: ``python -O`` drops asserts.
"""

from __future__ import annotations

import torch


def ptr(t: torch.Tensor | None) -> int | None:
    """The address of ``t``'s data, or None (a NULL pointer) for no tensor."""
    return None if t is None else t.data_ptr()


def need(ok: bool, name: str, what: str) -> None:
    """Raise ValueError naming the argument ``name`` unless ``ok`` (a real check, not an
    ``assert``: the kernels read raw pointers, and ``python -O`` drops asserts)."""
    if not ok:
        raise ValueError(f"{name}: {what}")


def check_tensor(t: object, dtype: torch.dtype, name: str, dims: int | None = None) -> None:
    """``t`` is a CPU tensor of ``dtype`` (with ``dims`` dimensions) whose last dimension is
    contiguous."""
    need(isinstance(t, torch.Tensor), name, f"need a tensor, got {type(t).__name__}")
    need(t.device.type == "cpu", name, f"need a CPU tensor, got {t.device}")
    need(t.dtype == dtype, name, f"need {dtype}, got {t.dtype}")
    if dims is not None:
        need(t.dim() == dims, name, f"need {dims} dimensions, got shape {tuple(t.shape)}")
    need(t.dim() == 0 or t.stride(-1) == 1, name, f"last dim not contiguous: {t.stride()}")


def check_contiguous(
    t: object, dtype: torch.dtype, name: str, shape: tuple[int, ...] | None = None
) -> None:
    """``t`` is a contiguous CPU tensor of ``dtype`` (and ``shape``)."""
    check_tensor(t, dtype, name)
    need(t.is_contiguous(), name, f"need a contiguous tensor, got strides {t.stride()}")
    if shape is not None:
        need(tuple(t.shape) == tuple(shape), name, f"need shape {shape}, got {tuple(t.shape)}")


def check_indices(t: torch.Tensor, end: int, name: str) -> None:
    """Every value of the int64 tensor ``t`` lies in [0, end)."""
    if t.numel():
        low, high = int(t.min()), int(t.max())
        need(0 <= low and high < end, name, f"values must lie in [0, {end}), got {low}..{high}")
