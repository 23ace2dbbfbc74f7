"""What this CPU computes natively: bf16 matmuls, or not.

PyTorch's bf16 matmul on a CPU without bf16 instructions (x86-64 without AVX512-BF16 or
AMX, ARM without the BF16 extension) converts through a slow generic path: on an AVX2
AMD EPYC (Zen 3) a (512, 576) x (576, 1536) bf16 matmul ran at 1.2 GFLOP/s against
116 GFLOP/s in float32, and the bf16 demo needed over a minute per step instead of a
few seconds. ``trinity run`` therefore computes in float32 there
(:func:`float32_where_bf16_is_slow`), saying so; ``TRINITY_KEEP_BF16=1`` keeps bf16.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trinity.config.schema import Config

KEEP_BF16 = "TRINITY_KEEP_BF16"


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo, or None where they cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.partition(":")[2].split())
    return None


def native_bf16(flags: set[str] | None = None, machine: str | None = None) -> bool | None:
    """Whether the CPU has bf16 matmul instructions; None when that cannot be told."""
    flags = cpu_flags() if flags is None else flags
    machine = (machine or platform.machine()).lower()
    if flags is None:
        return None
    if machine in ("x86_64", "amd64"):
        return bool(flags & {"avx512_bf16", "amx_bf16"})
    if machine in ("aarch64", "arm64"):
        return "bf16" in flags
    return None


def float32_where_bf16_is_slow(config: Config, native: bool | None = None) -> str | None:
    """Switch a CPU run's bfloat16 models (``model.dtype``, the rollout and auxiliary
    models) to float32 when this CPU has no bf16 matmul; the line to print, or None when
    nothing changed (GPUs configured, no bf16 in the config, ``TRINITY_KEEP_BF16=1``)."""
    if config.cluster.gpu_per_node > 0 or os.environ.get(KEEP_BF16, "") not in ("", "0"):
        return None
    engines = [config.explorer.rollout_model, *config.explorer.auxiliary_models]
    holders = [m for m in (config.model, *engines) if m.dtype == "bfloat16"]
    if not holders or (native_bf16() if native is None else native) is not False:
        return None
    for holder in holders:
        holder.dtype = "float32"
    return (
        "model.dtype: bfloat16 computes in float32 here: this CPU has no bf16 matmul "
        f"(AVX512-BF16, AMX or ARM BF16), where torch's bf16 runs far slower; {KEEP_BF16}=1 "
        "keeps bfloat16"
    )
