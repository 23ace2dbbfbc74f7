"""Prepacked bfloat16 linear layers for CPU decoding.

A bf16 ``F.linear`` on the CPU lets oneDNN reorder the weight into its blocked layout
on every call. During decoding (a few rows per call) that reorder costs about as much
as the product itself, so weights are reordered once here and the packed copy is used
for small inputs: about 1.5-2x faster per matmul for 1-64 rows on an AMX CPU. Large
inputs (prefill, scoring) keep the plain path, which is faster there.

The packed copy is a cache of ``weight``: after the weights change (a weight sync),
call :func:`repack`. Parameter names and tying are unchanged, so ``state_dict`` /
``load_state_dict`` work as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

PLAIN_ABOVE_ROWS = 256  # from here on the plain matmul is faster (prefill)
_LAYOUT_ROWS = 16  # the row count oneDNN tunes the packed layout for


class PackedLinear(nn.Module):
    """An ``nn.Linear`` stand-in that keeps a oneDNN-packed copy of its weight."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weight = linear.weight  # the same Parameter: names and ties survive
        self.bias = linear.bias
        self.repack()

    @torch.no_grad()
    def repack(self) -> None:
        self._packed = pack_weight(self.weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in_features) -> (..., out_features)."""
        if x.numel() > PLAIN_ABOVE_ROWS * self.in_features:
            return F.linear(x, self.weight, self.bias)
        return packed_linear(x, self._packed, self.bias)


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A (out, in) bf16 weight reordered into oneDNN's blocked layout, for :func:`packed_linear`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _LAYOUT_ROWS)


def packed_linear(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``F.linear`` with a weight from :func:`pack_weight`: (..., in) -> (..., out)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def packing_supported() -> bool:
    """Whether this torch build runs packed bf16 linears and they match ``F.linear``."""
    try:
        weight = torch.randn(32, 64, dtype=torch.bfloat16)
        x = torch.randn(3, 64, dtype=torch.bfloat16)
        packed = PackedLinear(nn.Linear(64, 32, bias=False).to(torch.bfloat16))
        packed.weight.data.copy_(weight)
        packed.repack()
        with torch.inference_mode():
            return torch.allclose(packed(x).float(), F.linear(x, weight).float(), atol=0.1)
    except (RuntimeError, AttributeError):
        return False


def pack_linears(model: nn.Module) -> list[PackedLinear]:
    """Replace every bf16 ``nn.Linear`` inside ``model`` by a :class:`PackedLinear`."""
    packed: list[PackedLinear] = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.dtype == torch.bfloat16:
                replacement = PackedLinear(child)
                setattr(parent, name, replacement)
                packed.append(replacement)
    return packed


def repack(layers: list[PackedLinear]) -> None:
    """Refresh the packed copies after the weights changed in place."""
    for layer in layers:
        layer.repack()
