"""Building and loading the kernel library, and the switches that choose the path.

The library is built from ``cpu_kernels.c`` with the system C compiler (``cc``, or
``$CC``) for this CPU (``-march=native``) into ``~/.cache/trinity/kernels``
(``$TRINITY_KERNEL_CACHE``), named by a hash of the source, the flags and the CPU's
feature flags; a build is written to a temporary name and renamed, so concurrent
processes and interrupted builds never load a partial file. When it loads, the ctypes
mirror :class:`~trinity.kernels.bindings.DecodeShape` is checked against the C struct's
own size and offsets.

Two environment switches choose the path (the tests run under each):

- ``TRINITY_CPU_KERNELS=0``: no kernels; :func:`load` returns None and callers keep
  their plain PyTorch path (same results within bf16 rounding; the tests compare both).
- ``TRINITY_KERNEL_MARCH=x86-64-v3`` (any ``-march`` value; default ``native``): build for
  that baseline ISA instead, so a CPU with AVX-512 or AMX runs the code paths of one
  without (no AVX512-BF16 attention, no AMX matmuls). Part of the build's cache key.

The kernels step aside (one logged line per process, then the PyTorch path) without a
compiler, on a CPU other than x86-64 or a C library other than glibc (the OpenMP
runtime must be the libgomp torch loaded).
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

import torch  # noqa: F401  loads torch's libgomp first: the library below then shares it

from trinity.kernels.bindings import KernelBuildError, Kernels
from trinity.utils.cpu import cpu_flags

logger = logging.getLogger("trinity.kernels")

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
