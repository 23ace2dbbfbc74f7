"""The ctypes side of the kernel library: argument types of each C function, the mirror
of the C ``decode_shape`` struct and the check that it matches, and :class:`Kernels`,
which binds a loaded library and offers its typed entry points.

The entry points live with their users' concern: decoding in :mod:`.decode`, training
layers and log-probabilities in :mod:`.training`, the optimizer step in
:mod:`.optimizer`; :class:`Kernels` composes them.
"""

from __future__ import annotations

import ctypes

from trinity.kernels.decode import DecodeKernels
from trinity.kernels.optimizer import OptimizerKernels
from trinity.kernels.training import TrainingKernels

_P, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
_SIGNATURES = {
    "add_rms_norm": [_P, _P, _P, _P, _I, _I, _F],
    "rope_kv": [_P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I],
    "silu_mul": [_P, _P, _I, _I],
    "adamw_step": [_P, _P, _P, _P, _P, _P, _I, _F, _F, _F, _F, _F, _F, _F],
    "logprob_rows": [_P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _F],
    "logprob_rows_backward": [_P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _F],
    "swiglu_forward": [_P, _P, _P, _I],
    "swiglu_backward": [_P, _P, _P, _P, _P, _I],
    "rms_norm_forward": [_P, _P, _P, _P, _I, _I, _F],
    "rms_norm_backward": [_P, _P, _P, _P, _P, _P, _I, _I],
    "rope_train": [_P, _P, _P, _P] + [_I] * 12 + [ctypes.c_int],
    "amx_linear": [_P, _P, _P, _I, _I, _I, ctypes.c_int],
    "decode_attention": [_P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _I, _I, _F]
    + [_P, _P, _P, _I, _I, _I],
    "sample_rows": [_P, _P, _P, _I, _I, _P, _P],
}


class DecodeShape(ctypes.Structure):
    """The sizes of one decode step that :func:`decode_layers` reads (the C
    ``decode_shape``): strides count bf16 elements."""

    _fields_ = [
        (name, ctypes.c_int64)
        for name in (
            "layers",
            "rows",
            "hidden",
            "heads",
            "kv_heads",
            "dim",
            "inter",
            "column",
            "layer_stride",
            "row_stride",
            "head_stride",
            "mask_stride",
            "prefix_len",
            "prefix_layer_stride",
            "prefix_row_stride",
            "prefix_head_stride",
        )
    ] + [("eps", ctypes.c_float), ("scale", ctypes.c_float)]


_SIGNATURES["decode_layers"] = [ctypes.POINTER(DecodeShape)] + [_P] * 19


class KernelBuildError(RuntimeError):
    """The library cannot be built or loaded here (the kernels step aside)."""


def check_layout(lib: ctypes.CDLL, mirror: type[ctypes.Structure]) -> None:
    """Raise KernelBuildError unless ``mirror`` has the C ``decode_shape``'s size, field
    count and field offsets (as the compiler laid them out)."""
    fn = lib.decode_shape_layout
    fn.argtypes, fn.restype = [_P, _I], _I
    out = (ctypes.c_int64 * 64)()
    n = fn(out, 64)
    size, count, offsets = out[0], out[1], list(out[2:n])
    names = [field[0] for field in mirror._fields_]
    ours = [getattr(mirror, name).offset for name in names]
    if (size, count, offsets) != (ctypes.sizeof(mirror), len(names), ours):
        raise KernelBuildError(
            f"the ctypes mirror {mirror.__name__} does not match the C decode_shape: C has "
            f"{count} fields at offsets {offsets} in {size} bytes, the mirror {len(names)} at "
            f"{ours} in {ctypes.sizeof(mirror)}; update one to match the other"
        )


class Kernels(DecodeKernels, TrainingKernels, OptimizerKernels):
    """Typed entry points of the library. Tensors must be contiguous CPU tensors of the
    dtypes named (except where a method says otherwise); the kernels write their outputs
    in place. Every entry point checks shapes, strides, dtypes and index ranges first and
    raises ValueError naming the argument."""

    def __init__(self, lib: ctypes.CDLL, mirror: type[ctypes.Structure] | None = None) -> None:
        check_layout(lib, DecodeShape if mirror is None else mirror)
        self.lib = lib  # the raw functions, for hot loops that checked their inputs once
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, None
        lib.amx_available.argtypes, lib.amx_available.restype = [], ctypes.c_int
        lib.sum_squares.argtypes, lib.sum_squares.restype = [_P, _P, _I], ctypes.c_double
        # built for AMX and the kernel grants this process the tile state
        self.amx = bool(lib.amx_available())
