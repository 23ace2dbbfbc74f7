"""Fused CPU kernels, compiled from ``cpu_kernels.c`` at first use and called via ctypes.

Decoding a few rows at a time, most of a step outside the matmuls is ATen's per-op
overhead: an RMS norm is six ops, rotary embedding four, SiLU-and-multiply two, each a
few microseconds for a few thousand elements. The optimizer step of bf16 weights is
three passes over 135 M elements (gradient cast, AdamW, copy into the bf16 parameter).
The kernels here do each of those in one pass:

- :func:`add_rms_norm` residual add + RMS norm; :func:`rope_kv` rotary embedding of q
  and k plus the cache writes of k and v; :func:`silu_mul` (decode, see
  :mod:`trinity.models.fast_decode`);
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
  prepacked by :func:`amx_pack` (:mod:`trinity.models.fast_decode`; CPUs without AMX
  keep oneDNN's matmul);
- :func:`decode_attention` one new token per row attending to its KV cache, and
  ``decode_layers``, which runs a decode step's whole layer loop (the kernels above,
  AMX matmuls) in one call.

The library is built with the system C compiler (``cc``, or ``$CC``) for this CPU
(``-march=native``) into ``~/.cache/trinity/kernels`` (``$TRINITY_KERNEL_CACHE``), named
by a hash of the source, the flags and the CPU's feature flags; a build is written to a
temporary name and renamed, so concurrent processes and interrupted builds never load
a partial file. When it loads, the ctypes mirror :class:`DecodeShape` is checked against
the C struct's own size and offsets.

Two environment switches choose the path (the tests run under each):

- ``TRINITY_CPU_KERNELS=0``: no kernels; :func:`load` returns None and callers keep
  their plain PyTorch path (same results within bf16 rounding; the tests compare both).
- ``TRINITY_KERNEL_MARCH=x86-64-v3`` (any ``-march`` value; default ``native``): build for
  that baseline ISA instead, so a CPU with AVX-512 or AMX runs the code paths of one
  without (no AVX512-BF16 attention, no AMX matmuls). Part of the build's cache key.

The kernels step aside (one logged line per process, then the PyTorch path) without a
compiler, on a CPU other than x86-64 or a C library other than glibc (the OpenMP
runtime must be the libgomp torch loaded).

Contracts: the elementwise kernels (rotary embedding, residual adds, the rounding of a
result to bf16, AdamW's parameter copy) round as the bf16 PyTorch ops do, bit for bit on
every ISA. Sums (RMS norm's sum of squares, log-sum-exp and entropy, dot products,
softmax sums, the sampler's totals) are float32 sums in an order that depends on the
vector width: they are within a stated bound of float64 for any order, not equal to
torch's bits.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch  # loads torch's libgomp first: the library below then shares it

from trinity.utils.cpu import cpu_flags

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_kernels.c")
FLAGS = [
    "-O3",
    "-fopenmp",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=off",
    "-fPIC",
    "-shared",
]

_lock = threading.Lock()
_loaded: dict[str, Kernels | None] = {}

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


def enabled() -> bool:
    return os.environ.get("TRINITY_CPU_KERNELS", "1").lower() not in ("0", "false", "no", "off")


def march() -> str:
    """The ``-march`` the library is built for: ``$TRINITY_KERNEL_MARCH`` or native."""
    return os.environ.get("TRINITY_KERNEL_MARCH", "").strip() or "native"


def flags() -> list[str]:
    """The compiler flags of a build (those of :data:`FLAGS` and the ``-march``)."""
    return [FLAGS[0], f"-march={march()}", *FLAGS[1:]]


def _platform() -> tuple[str, str, str]:
    """(system, machine, C library) of this process, as :mod:`platform` names them."""
    return platform.system(), platform.machine(), platform.libc_ver()[0]


def unsupported_reason() -> str | None:
    """Why this platform cannot run the kernels, or None: they need Linux on x86-64 with
    glibc (x86 intrinsics; the libgomp that torch loaded, shared by soname)."""
    system, machine, libc = _platform()
    if system != "Linux":
        return f"built on Linux only, not {system}"
    if machine.lower() not in ("x86_64", "amd64"):
        return f"built for x86-64 only, not {machine}"
    if libc != "glibc":
        return f"needs glibc, not {libc or 'an unknown C library'}"
    return None


def load() -> Kernels | None:
    """The compiled kernels, or None (disabled, an unsupported platform, no working
    compiler, or a library whose layout differs from its mirror; the reason is logged
    once per process)."""
    if not enabled():
        return None
    with _lock:
        if "lib" not in _loaded:
            try:
                reason = unsupported_reason()
                if reason is not None:
                    raise KernelBuildError(reason)
                _loaded["lib"] = Kernels(ctypes.CDLL(str(build())))
            except (KernelBuildError, OSError) as exc:
                logger.warning("fused CPU kernels unavailable, using PyTorch ops: %s", exc)
                _loaded["lib"] = None
        return _loaded["lib"]


def _cpu_flags() -> str:
    flags = cpu_flags()
    return " ".join(sorted(flags)) if flags is not None else platform.processor()


def cache_dir() -> Path:
    root = os.environ.get("TRINITY_KERNEL_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "trinity" / "kernels"


def build() -> Path:
    """Compile the library unless a build for this source, these flags and this CPU exists."""
    reason = unsupported_reason()
    if reason is not None:
        raise KernelBuildError(reason)
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise KernelBuildError("no C compiler (cc or gcc) on PATH; set CC")
    source, build_flags = SOURCE.read_bytes(), flags()
    key = hashlib.sha256(
        source + " ".join([compiler, *build_flags, platform.machine(), _cpu_flags()]).encode()
    ).hexdigest()[:16]
    target = cache_dir() / f"cpu_kernels-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=target.stem, suffix=".so.partial", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler, *build_flags, str(SOURCE), "-o", partial, "-lm"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise KernelBuildError(f"{compiler} failed: {done.stderr.strip()[-2000:]}")
        os.replace(partial, target)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KernelBuildError(f"cannot run {compiler}: {exc}") from exc
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    logger.debug("built %s", target)
    return target


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _need(ok: bool, name: str, what: str) -> None:
    """Raise ValueError naming the argument ``name`` unless ``ok`` (a real check, not an
    ``assert``: the kernels read raw pointers, and ``python -O`` drops asserts)."""
    if not ok:
        raise ValueError(f"{name}: {what}")


def _tensor(t: object, dtype: torch.dtype, name: str, dims: int | None = None) -> None:
    """``t`` is a CPU tensor of ``dtype`` (with ``dims`` dimensions) whose last dimension is
    contiguous."""
    _need(isinstance(t, torch.Tensor), name, f"need a tensor, got {type(t).__name__}")
    _need(t.device.type == "cpu", name, f"need a CPU tensor, got {t.device}")
    _need(t.dtype == dtype, name, f"need {dtype}, got {t.dtype}")
    if dims is not None:
        _need(t.dim() == dims, name, f"need {dims} dimensions, got shape {tuple(t.shape)}")
    _need(t.dim() == 0 or t.stride(-1) == 1, name, f"last dim not contiguous: {t.stride()}")


def _check(t: object, dtype: torch.dtype, name: str, shape: tuple[int, ...] | None = None) -> None:
    """``t`` is a contiguous CPU tensor of ``dtype`` (and ``shape``)."""
    _tensor(t, dtype, name)
    _need(t.is_contiguous(), name, f"need a contiguous tensor, got strides {t.stride()}")
    if shape is not None:
        _need(tuple(t.shape) == tuple(shape), name, f"need shape {shape}, got {tuple(t.shape)}")


def _indices(t: torch.Tensor, end: int, name: str) -> None:
    """Every value of the int64 tensor ``t`` lies in [0, end)."""
    if t.numel():
        low, high = int(t.min()), int(t.max())
        _need(0 <= low and high < end, name, f"values must lie in [0, {end}), got {low}..{high}")


def _check_layout(lib: ctypes.CDLL, mirror: type[ctypes.Structure]) -> None:
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


class Kernels:
    """Typed entry points of the library. Tensors must be contiguous CPU tensors of the
    dtypes named (except where a method says otherwise); the kernels write their outputs
    in place. Every entry point checks shapes, strides, dtypes and index ranges first and
    raises ValueError naming the argument."""

    def __init__(self, lib: ctypes.CDLL, mirror: type[ctypes.Structure] | None = None) -> None:
        _check_layout(lib, DecodeShape if mirror is None else mirror)
        self.lib = lib  # the raw functions, for hot loops that checked their inputs once
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, None
        lib.amx_available.argtypes, lib.amx_available.restype = [], ctypes.c_int
        lib.sum_squares.argtypes, lib.sum_squares.restype = [_P, _P, _I], ctypes.c_double
        # built for AMX and the kernel grants this process the tile state
        self.amx = bool(lib.amx_available())

    @staticmethod
    def amx_fits(weight: torch.Tensor) -> bool:
        """Whether :meth:`amx_linear` takes this (N, K) weight: bf16, N a multiple of 16
        and K of 32."""
        return (
            weight.dtype == torch.bfloat16
            and weight.dim() == 2
            and weight.shape[0] % 16 == 0
            and weight.shape[1] % 32 == 0
        )

    @staticmethod
    def amx_pack(weight: torch.Tensor) -> torch.Tensor:
        """(N, K) bf16 -> the tile layout :meth:`amx_linear` reads: (N/16, K/32, 16, 16, 2),
        element [n, s, r, c, j] = weight[16 n + c, 32 s + 2 r + j]."""
        if not Kernels.amx_fits(weight):
            raise ValueError(
                f"amx_pack: need (16 a, 32 b) bf16, got {weight.dtype} {tuple(weight.shape)}"
            )
        n, k = weight.shape
        # each pair of inputs moved as one int32: about 3x faster than bf16 by bf16
        pairs = weight.detach().contiguous().view(torch.int32).view(n // 16, 16, k // 32, 16)
        packed = pairs.permute(0, 2, 3, 1).contiguous().view(torch.bfloat16)
        return packed.view(n // 16, k // 32, 16, 16, 2)

    def amx_linear(
        self, x: torch.Tensor, packed: torch.Tensor, out_f32: bool = False
    ) -> torch.Tensor:
        """x (M, K) bf16 @ W^T with W packed by :meth:`amx_pack` -> (M, N) bf16, or its
        values widened to float32 with ``out_f32``. Needs :attr:`amx`."""
        if not self.amx:
            raise RuntimeError("amx_linear: this CPU or kernel offers no AMX tiles")
        _tensor(x, torch.bfloat16, "x", dims=2)
        _check(x, torch.bfloat16, "x")
        rows, k = x.shape
        _need(k % 32 == 0, "x", f"need a multiple of 32 inputs, got {k}")
        _tensor(packed, torch.bfloat16, "packed", dims=5)
        _check(packed, torch.bfloat16, "packed", (packed.shape[0], k // 32, 16, 16, 2))
        n = packed.shape[0] * 16
        out = torch.empty((rows, n), dtype=torch.float32 if out_f32 else torch.bfloat16)
        self.lib.amx_linear(_ptr(x), _ptr(packed), _ptr(out), rows, n, k, int(out_f32))
        return out

    @staticmethod
    def _cache(t: torch.Tensor, name: str, shape: tuple[int, ...], dim: int) -> None:
        """A (.., .., columns, dim) bf16 cache whose columns are ``dim`` contiguous values."""
        _tensor(t, torch.bfloat16, name, dims=4)
        _need(tuple(t.shape) == shape, name, f"need shape {shape}, got {tuple(t.shape)}")
        _need(t.stride(2) == dim, name, f"columns must be {dim} apart, got strides {t.stride()}")

    def decode_attention(
        self,
        q: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        steps: int,
        mask: torch.Tensor | None = None,
        prefix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """One new token per row attending to columns ``0 .. steps-1`` of its cache:
        q (rows, heads, dim), keys / values (rows, kv_heads, T, dim) (rows and heads may be
        strided, each column's ``dim`` values contiguous) -> (rows, heads * dim) bf16, as
        ``scaled_dot_product_attention`` with ``enable_gqa`` computes it.

        ``prefix``: (keys, values, prompt_of): (prompts, kv_heads, P, dim) caches of
        prompts that row r attends to first (prompt ``prompt_of[r]``), shared by the rows
        that sample from the same prompt. ``mask``: None or additive bf16 over the first
        segment: (prompts, >= P) over the prefix when there is one, else (rows, >=
        steps) over the rows' own columns."""
        _tensor(q, torch.bfloat16, "q", dims=3)
        _check(q, torch.bfloat16, "q")
        rows, heads, dim = q.shape
        _tensor(keys, torch.bfloat16, "keys", dims=4)
        kv_heads, capacity = keys.shape[1], keys.shape[2]
        _need(kv_heads > 0 and heads % kv_heads == 0, "keys", f"{kv_heads} kv heads for {heads}")
        self._cache(keys, "keys", (rows, kv_heads, capacity, dim), dim)
        self._cache(values, "values", tuple(keys.shape), dim)
        _need(values.stride() == keys.stride(), "values", "need the strides of keys")
        _need(0 < steps <= capacity, "steps", f"need 1..{capacity}, got {steps}")
        prefix_keys = prefix_values = prompt_of = None
        prefix_len = prefix_row = prefix_head = 0
        mask_rows, mask_columns = rows, steps
        if prefix is not None:
            prefix_keys, prefix_values, prompt_of = prefix
            _tensor(prefix_keys, torch.bfloat16, "prefix keys", dims=4)
            prompts, prefix_len = prefix_keys.shape[0], prefix_keys.shape[2]
            self._cache(prefix_keys, "prefix keys", (prompts, kv_heads, prefix_len, dim), dim)
            self._cache(prefix_values, "prefix values", tuple(prefix_keys.shape), dim)
            _need(
                prefix_values.stride() == prefix_keys.stride(),
                "prefix values",
                "need the strides of the prefix keys",
            )
            _check(prompt_of, torch.int64, "prompt_of", (rows,))
            _indices(prompt_of, prompts, "prompt_of")
            prefix_row, prefix_head = prefix_keys.stride(0), prefix_keys.stride(1)
            mask_rows, mask_columns = prompts, prefix_len
        if mask is not None:
            _tensor(mask, torch.bfloat16, "mask", dims=2)
            _need(
                mask.shape[0] >= mask_rows and mask.shape[1] >= mask_columns,
                "mask",
                f"need at least ({mask_rows}, {mask_columns}), got {tuple(mask.shape)}",
            )
        out = q.new_empty((rows, heads * dim))
        self.lib.decode_attention(
            _ptr(q),
            _ptr(keys),
            _ptr(values),
            _ptr(mask),
            _ptr(out),
            rows,
            heads,
            kv_heads,
            dim,
            steps,
            keys.stride(0),
            keys.stride(1),
            0 if mask is None else mask.stride(0),
            dim**-0.5,
            _ptr(prefix_keys),
            _ptr(prefix_values),
            _ptr(prompt_of),
            prefix_len,
            prefix_row,
            prefix_head,
        )
        return out

    def sample_rows(
        self, logits: torch.Tensor, temperature: torch.Tensor, u: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One token per row of (B, V) float32 ``logits`` at ``temperature`` (B,) (<= 0:
        greedy) from the uniform numbers ``u`` (B,) -> tokens (B,) int64 and their
        log-softmax (B,) float32, as :func:`trinity.models.sampling.sample_tokens` draws
        them without top-k, top-p or banned tokens (within float rounding of the sums)."""
        _tensor(logits, torch.float32, "logits", dims=2)
        _check(logits, torch.float32, "logits")
        rows, vocab = logits.shape
        _need(vocab > 0, "logits", "need a vocabulary of at least one token")
        _check(temperature, torch.float32, "temperature", (rows,))
        _check(u, torch.float32, "u", (rows,))
        tokens = torch.empty(rows, dtype=torch.int64)
        logprobs = torch.empty(rows, dtype=torch.float32)
        self.lib.sample_rows(
            _ptr(logits), _ptr(temperature), _ptr(u), rows, vocab, _ptr(tokens), _ptr(logprobs)
        )
        return tokens, logprobs

    def add_rms_norm(
        self,
        x: torch.Tensor,
        delta: torch.Tensor | None,
        weight: torch.Tensor,
        out: torch.Tensor,
        eps: float,
    ) -> None:
        """x += delta (if given); out = rms_norm(x) * weight. All (rows, dim) bf16."""
        _tensor(x, torch.bfloat16, "x", dims=2)
        _check(x, torch.bfloat16, "x")
        rows, dim = x.shape
        _check(weight, torch.bfloat16, "weight", (dim,))
        _check(out, torch.bfloat16, "out", (rows, dim))
        if delta is not None:
            _check(delta, torch.bfloat16, "delta", (rows, dim))
        self.lib.add_rms_norm(_ptr(x), _ptr(delta), _ptr(weight), _ptr(out), rows, dim, eps)

    def rope_kv(
        self,
        qkv: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        q_out: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        column: int,
    ) -> None:
        """RoPE of q and k of one token per row; q into ``q_out`` (rows, heads, dim), k and
        v into column ``column`` of ``keys`` / ``values`` (rows, kv_heads, T, dim)."""
        _tensor(q_out, torch.bfloat16, "q_out", dims=3)
        _check(q_out, torch.bfloat16, "q_out")
        rows, heads, dim = q_out.shape
        _need(dim % 2 == 0, "q_out", f"need an even head dim, got {dim}")
        _tensor(keys, torch.bfloat16, "keys", dims=4)
        kv_heads, capacity = keys.shape[1], keys.shape[2]
        _need(
            tuple(keys.shape) == (rows, kv_heads, capacity, dim),
            "keys",
            f"need ({rows}, kv_heads, T, {dim}), got {tuple(keys.shape)}",
        )
        _tensor(values, torch.bfloat16, "values", dims=4)
        _need(
            values.shape == keys.shape and values.stride() == keys.stride(),
            "values",
            f"need the shape and strides of keys, got {tuple(values.shape)} {values.stride()}",
        )
        _check(qkv, torch.bfloat16, "qkv", (rows, (heads + 2 * kv_heads) * dim))
        _check(positions, torch.int64, "positions", (rows,))
        _tensor(cos, torch.bfloat16, "cos", dims=2)
        _check(cos, torch.bfloat16, "cos", (cos.shape[0], dim))
        _check(sin, torch.bfloat16, "sin", tuple(cos.shape))
        _indices(positions, cos.shape[0], "positions")
        _need(0 <= column < capacity, "column", f"need 0..{capacity - 1}, got {column}")
        self.lib.rope_kv(
            _ptr(qkv),
            _ptr(positions),
            _ptr(cos),
            _ptr(sin),
            _ptr(q_out),
            keys[:, :, column].data_ptr(),
            values[:, :, column].data_ptr(),
            rows,
            heads,
            kv_heads,
            dim,
            keys.stride(0),
            keys.stride(1),
        )

    def silu_mul(self, gate_up: torch.Tensor, out: torch.Tensor) -> None:
        """out (rows, I) = silu(gate_up[:, :I]) * gate_up[:, I:]."""
        _tensor(out, torch.bfloat16, "out", dims=2)
        _check(out, torch.bfloat16, "out")
        rows, inter = out.shape
        _check(gate_up, torch.bfloat16, "gate_up", (rows, 2 * inter))
        self.lib.silu_mul(_ptr(gate_up), _ptr(out), rows, inter)

    def adamw_step(
        self,
        master: torch.Tensor,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
        grad: torch.Tensor,
        param: torch.Tensor,
        *,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        step: int,
        grad_scale: float = 1.0,
    ) -> None:
        """One AdamW update of ``master`` (fp32) from ``grad`` (bf16 or fp32) at step
        ``step`` (1-based), as torch.optim.AdamW; ``param`` (bf16) gets the new value."""
        _check(master, torch.float32, "master")
        n = master.numel()
        for t, name in ((exp_avg, "exp_avg"), (exp_avg_sq, "exp_avg_sq")):
            _check(t, torch.float32, name)
            _need(t.numel() == n, name, f"need {n} elements, got {t.numel()}")
        _check(param, torch.bfloat16, "param")
        _need(param.numel() == n, "param", f"need {n} elements, got {param.numel()}")
        _need(
            isinstance(grad, torch.Tensor) and grad.dtype in (torch.bfloat16, torch.float32),
            "grad",
            f"need bf16 or float32, got {getattr(grad, 'dtype', type(grad).__name__)}",
        )
        _check(grad, grad.dtype, "grad")
        _need(grad.numel() == n, "grad", f"need {n} elements, got {grad.numel()}")
        _need(step >= 1, "step", f"steps count from 1, got {step}")
        beta1, beta2 = betas
        bf16_grad = grad.dtype == torch.bfloat16
        self.lib.adamw_step(
            _ptr(master),
            _ptr(exp_avg),
            _ptr(exp_avg_sq),
            grad.data_ptr() if bf16_grad else None,
            None if bf16_grad else grad.data_ptr(),
            _ptr(param),
            n,
            beta1,
            beta2,
            eps,
            1.0 - lr * weight_decay,
            lr / (1.0 - beta1**step),
            (1.0 - beta2**step) ** 0.5,
            grad_scale,
        )

    def swiglu_forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up, bf16, same shapes."""
        _check(gate, torch.bfloat16, "gate")
        _check(up, torch.bfloat16, "up", tuple(gate.shape))
        out = torch.empty_like(gate)
        self.lib.swiglu_forward(_ptr(gate), _ptr(up), _ptr(out), gate.numel())
        return out

    def swiglu_backward(
        self, grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(grad_gate, grad_up) of :meth:`swiglu_forward` for the output gradient ``grad``."""
        _check(gate, torch.bfloat16, "gate")
        _check(up, torch.bfloat16, "up", tuple(gate.shape))
        _check(grad, torch.bfloat16, "grad", tuple(gate.shape))
        grad_gate, grad_up = torch.empty_like(gate), torch.empty_like(up)
        self.lib.swiglu_backward(
            _ptr(grad), _ptr(gate), _ptr(up), _ptr(grad_gate), _ptr(grad_up), gate.numel()
        )
        return grad_gate, grad_up

    def rms_norm_forward(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(y, rstd): y = weight * bf16(x / sqrt(mean(x^2) + eps)) over the last dim of
        ``x`` (bf16), rstd the float32 1 / sqrt(...) of each row."""
        _check(x, torch.bfloat16, "x")
        _need(x.dim() >= 1 and x.shape[-1] > 0, "x", f"need a last dim, got {tuple(x.shape)}")
        dim = x.shape[-1]
        _check(weight, torch.bfloat16, "weight", (dim,))
        rows = x.numel() // dim
        y = torch.empty_like(x)
        rstd = torch.empty(x.shape[:-1], dtype=torch.float32)
        self.lib.rms_norm_forward(_ptr(x), _ptr(weight), _ptr(y), _ptr(rstd), rows, dim, eps)
        return y, rstd

    def rms_norm_backward(
        self, grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(grad_x bf16, grad_weight float32) of :meth:`rms_norm_forward`."""
        _check(x, torch.bfloat16, "x")
        _need(x.dim() >= 1 and x.shape[-1] > 0, "x", f"need a last dim, got {tuple(x.shape)}")
        dim = x.shape[-1]
        _check(grad, torch.bfloat16, "grad", tuple(x.shape))
        _check(weight, torch.bfloat16, "weight", (dim,))
        _check(rstd, torch.float32, "rstd", tuple(x.shape[:-1]))
        grad_x = torch.empty_like(x)
        grad_w = torch.empty(dim, dtype=torch.float32)
        self.lib.rms_norm_backward(
            _ptr(grad), _ptr(x), _ptr(weight), _ptr(rstd), _ptr(grad_x), _ptr(grad_w),
            rstd.numel(), dim,
        )  # fmt: skip
        return grad_x, grad_w

    def rope(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        backward: bool = False,
        like: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
    ) -> torch.Tensor:
        """Rotary embedding of ``x`` (B, H, T, D) bf16 with ``cos`` and ``sin`` (B or 1,
        T, D), as transformers' ``apply_rotary_pos_emb`` rounds it in bf16; with
        ``backward``, ``x`` is the output's gradient and the result the input's. Any
        strides with a contiguous last dimension; the result has ``x``'s strides, or the
        (shape, stride) of ``like``."""
        _tensor(x, torch.bfloat16, "x", dims=4)
        _tensor(cos, torch.bfloat16, "cos", dims=3)
        _tensor(sin, torch.bfloat16, "sin", dims=3)
        batch, heads, steps, dim = x.shape
        _need(dim % 2 == 0, "x", f"need an even head dim, got {dim}")
        _need(
            cos.shape == sin.shape and cos.stride() == sin.stride(),
            "sin",
            f"need the shape and strides of cos, got {tuple(sin.shape)} {sin.stride()}",
        )
        if cos.shape[0] not in (1, batch) or tuple(cos.shape[1:]) != (steps, dim):
            raise ValueError(
                f"cos: cos/sin must be ({batch} or 1, {steps}, {dim}), got {tuple(cos.shape)}"
            )
        if like is None:
            out = torch.empty_like(x)
        else:
            out = torch.empty_strided(*like, dtype=torch.bfloat16)
        _need(
            out.shape == x.shape and out.stride(-1) == 1,
            "like",
            f"need the shape of x with a contiguous last dim, got {tuple(out.shape)} {out.stride()}",
        )
        self.lib.rope_train(
            _ptr(x), _ptr(out), _ptr(cos), _ptr(sin), batch, heads, steps, dim,
            x.stride(0), x.stride(1), x.stride(2), out.stride(0), out.stride(1), out.stride(2),
            cos.stride(0) if cos.shape[0] > 1 else 0, cos.stride(1), int(backward),
        )  # fmt: skip
        return out

    def sum_squares(self, t: torch.Tensor) -> float:
        """The sum of the squares of a contiguous bf16 or float32 tensor, accumulated in
        float32 per block of 4096 values and in double across blocks."""
        _need(
            isinstance(t, torch.Tensor) and t.dtype in (torch.bfloat16, torch.float32),
            "t",
            f"sum_squares: need bf16 or float32, got {getattr(t, 'dtype', type(t).__name__)}",
        )
        _check(t, t.dtype, "t")
        bf16 = t.dtype == torch.bfloat16
        return self.lib.sum_squares(
            t.data_ptr() if bf16 else None, None if bf16 else t.data_ptr(), t.numel()
        )

    def logprob_rows(
        self, logits: torch.Tensor, labels: torch.Tensor, temperature: float, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(logprob, lse, entropy or None), each (B, T) float32, of (B, T, V) bf16 logits
        whose last dimension is contiguous."""
        self._check_logits(logits, labels, temperature)
        batch, steps, vocab = logits.shape
        out = torch.empty((batch, steps), dtype=torch.float32)
        lse = torch.empty_like(out)
        ent = torch.empty_like(out) if entropy else None
        labels = labels.contiguous()
        self.lib.logprob_rows(
            logits.data_ptr(), labels.data_ptr(), out.data_ptr(), lse.data_ptr(),
            _ptr(ent), batch, steps, vocab, logits.stride(0), logits.stride(1),
            1.0 / temperature,
        )  # fmt: skip
        return out, lse, ent

    def logprob_rows_backward(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor,
        lse: torch.Tensor,
        grad: torch.Tensor,
        temperature: float,
    ) -> torch.Tensor:
        """d(sum grad * logprob) / d logits: (B, T, V) bf16, contiguous."""
        self._check_logits(logits, labels, temperature)
        batch, steps, vocab = logits.shape
        _check(lse, torch.float32, "lse", (batch, steps))
        _need(
            isinstance(grad, torch.Tensor) and tuple(grad.shape) == (batch, steps),
            "grad",
            f"need shape ({batch}, {steps}), got {tuple(getattr(grad, 'shape', ()))}",
        )
        _need(grad.device.type == "cpu", "grad", f"need a CPU tensor, got {grad.device}")
        grad = grad.float().contiguous()
        labels = labels.contiguous()
        out = torch.empty((batch, steps, vocab), dtype=torch.bfloat16)
        self.lib.logprob_rows_backward(
            logits.data_ptr(), labels.data_ptr(), lse.data_ptr(), grad.data_ptr(),
            out.data_ptr(), batch, steps, vocab, logits.stride(0), logits.stride(1),
            1.0 / temperature,
        )  # fmt: skip
        return out

    @staticmethod
    def _check_logits(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> None:
        _tensor(logits, torch.bfloat16, "logits", dims=3)
        batch, steps, vocab = logits.shape
        _need(vocab > 0, "logits", "need a vocabulary of at least one token")
        _need(
            isinstance(labels, torch.Tensor)
            and labels.device.type == "cpu"
            and labels.dtype == torch.int64
            and tuple(labels.shape) == (batch, steps),
            "labels",
            f"need a CPU int64 ({batch}, {steps}) tensor, got "
            f"{getattr(labels, 'dtype', type(labels).__name__)} {tuple(getattr(labels, 'shape', ()))}",
        )
        _indices(labels, vocab, "labels")
        _need(temperature > 0, "temperature", f"need > 0, got {temperature}")
