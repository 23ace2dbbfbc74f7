"""Fused CPU kernels, compiled from ``cpu_kernels.c`` at first use and called via ctypes.

Decoding a few rows at a time, most of a step outside the matmuls is ATen's per-op
overhead: an RMS norm is six ops, rotary embedding four, SiLU-and-multiply two, each a
few microseconds for a few thousand elements. The optimizer step of bf16 weights is
three passes over 135 M elements (gradient cast, AdamW, copy into the bf16 parameter).
The kernels here do each of those in one pass:

- :func:`add_rms_norm` residual add + RMS norm; :func:`rope_kv` rotary embedding of q
  and k plus the cache writes of k and v; :func:`silu_mul` (decode, see
  :mod:`trinity.rollout.fast_decode`);
- :func:`logprob_rows` log-probabilities of the labels, log-sum-exp and entropy of bf16
  logits in two read-only passes per position, and its backward pass in one
  (:mod:`trinity.algorithm.utils`);
- :func:`adamw_step` AdamW on an fp32 master from a bf16 (or fp32) gradient, writing the
  rounded bf16 parameter too (:mod:`trinity.trainer.precision`);
- :func:`swiglu_forward` / :func:`swiglu_backward` and :func:`rms_norm_forward` /
  :func:`rms_norm_backward`: the MLP product and the RMS norm of Llama-family models in
  training, one pass each way, and :func:`rope_train` the rotary embedding of q or k and
  its backward (:mod:`trinity.trainer.fused_layers`); :func:`sum_squares` for the
  gradient norm (:mod:`trinity.trainer.precision`);
- :func:`amx_linear` decode-sized bf16 linear layers on Intel AMX, from weights
  prepacked by :func:`amx_pack` (:mod:`trinity.rollout.fast_decode`; CPUs without AMX
  keep oneDNN's matmul);
- :func:`decode_attention` one new token per row attending to its KV cache, and
  ``decode_layers``, which runs a decode step's whole layer loop (the kernels above,
  AMX matmuls) in one call.

Contracts: the elementwise kernels (rotary embedding, residual adds, the rounding of a
result to bf16, AdamW's parameter copy) round as the bf16 PyTorch ops do, bit for bit on
every ISA. Sums (RMS norm's sum of squares, log-sum-exp and entropy, dot products,
softmax sums, the sampler's totals) are float32 sums in an order that depends on the
vector width: they are within a stated bound of float64 for any order, not equal to
torch's bits.

Modules: :mod:`.loader` builds and loads the library (and reads the switches
``TRINITY_CPU_KERNELS`` and ``TRINITY_KERNEL_MARCH``); :mod:`.bindings` declares the C
signatures and binds them in :class:`Kernels`; :mod:`.decode`, :mod:`.training` and
:mod:`.optimizer` hold the entry points of each use; :mod:`.checks` their argument
checks.
"""

from trinity.kernels.bindings import DecodeShape, KernelBuildError, Kernels
from trinity.kernels.loader import (
    FLAGS,
    SOURCE,
    build,
    cache_dir,
    enabled,
    flags,
    load,
    march,
    unsupported_reason,
)

__all__ = [
    "FLAGS",
    "SOURCE",
    "DecodeShape",
    "KernelBuildError",
    "Kernels",
    "build",
    "cache_dir",
    "enabled",
    "flags",
    "load",
    "march",
    "unsupported_reason",
]
