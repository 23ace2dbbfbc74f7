"""How trinity/kernels builds and loads its library: the cache, the ISA switch, the
platforms where the kernels step aside, and the check of the ctypes mirror of the C
``decode_shape``."""

from __future__ import annotations

import ctypes
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trinity import kernels
from trinity.kernels import bindings, loader

needs_compiler = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler"
)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """load() as at the start of a process (the kernels enabled), restored afterwards."""
    monkeypatch.setattr(loader, "_loaded", {})
    monkeypatch.delenv("TRINITY_CPU_KERNELS", raising=False)


def test_without_a_compiler_the_kernels_are_off(tmp_path: Path) -> None:
    code = (
        "import logging; logging.basicConfig();"
        "from trinity import kernels; print('LOADED', kernels.load() is not None)"
    )
    env = {
        "PATH": "/nonexistent",
        "CC": str(tmp_path / "no-such-cc"),
        "TRINITY_KERNEL_CACHE": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
    }
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "LOADED False" in done.stdout, done.stderr
    assert "fused CPU kernels unavailable" in done.stderr and "no-such-cc" in done.stderr
    off = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "TRINITY_CPU_KERNELS": "0"},
        capture_output=True,
        text=True,
    )
    assert "LOADED False" in off.stdout and "unavailable" not in off.stderr


@needs_compiler
def test_a_build_is_cached_by_source_cpu_and_march(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRINITY_KERNEL_CACHE", str(tmp_path))
    monkeypatch.delenv("TRINITY_KERNEL_MARCH", raising=False)
    assert "-march=native" in kernels.flags()
    first = kernels.build()
    assert first.parent == tmp_path and first.suffix == ".so"
    mtime = first.stat().st_mtime_ns
    assert kernels.build() == first and first.stat().st_mtime_ns == mtime  # not rebuilt
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no partial files left
    # a baseline ISA is another library, beside the first
    monkeypatch.setenv("TRINITY_KERNEL_MARCH", "x86-64-v2")
    assert "-march=x86-64-v2" in kernels.flags() and "-march=native" not in kernels.flags()
    baseline = kernels.build()
    assert baseline != first and sorted(tmp_path.iterdir()) == sorted([first, baseline])


@needs_compiler
def test_a_baseline_build_gives_the_native_builds_elementwise_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Elementwise kernels round alike on every ISA: a build for x86-64-v2 (no AVX, no
    FMA, no AMX) and this CPU's build give the same bits; a sum's bits may differ."""
    monkeypatch.setenv("TRINITY_KERNEL_CACHE", str(tmp_path))
    monkeypatch.delenv("TRINITY_KERNEL_MARCH", raising=False)
    native = kernels.Kernels(ctypes.CDLL(str(kernels.build())))
    monkeypatch.setenv("TRINITY_KERNEL_MARCH", "x86-64-v2")
    baseline = kernels.Kernels(ctypes.CDLL(str(kernels.build())))
    assert not baseline.amx
    gen = torch.Generator().manual_seed(0)
    gate, up, grad = (torch.randn(7, 300, generator=gen).bfloat16() * 4 for _ in range(3))
    assert torch.equal(native.swiglu_forward(gate, up), baseline.swiglu_forward(gate, up))
    for a, b in zip(
        native.swiglu_backward(grad, gate, up),
        baseline.swiglu_backward(grad, gate, up),
        strict=True,
    ):
        assert torch.equal(a, b)
    x = torch.randn(2, 4, 5, 16, generator=gen).bfloat16()
    cos, sin = (torch.randn(1, 5, 16, generator=gen).bfloat16() for _ in range(2))
    assert torch.equal(native.rope(x, cos, sin), baseline.rope(x, cos, sin))
    gate_up = torch.randn(3, 600, generator=gen).bfloat16() * 4
    outs = [torch.empty(3, 300, dtype=torch.bfloat16) for _ in range(2)]
    native.silu_mul(gate_up, outs[0])
    baseline.silu_mul(gate_up, outs[1])
    assert torch.equal(*outs)


@pytest.mark.parametrize(
    "probe, reason",
    [
        (("Linux", "aarch64", "glibc"), "x86-64 only, not aarch64"),
        (("Darwin", "arm64", ""), "Linux only, not Darwin"),
        (("Linux", "x86_64", ""), "needs glibc"),
    ],
)
def test_the_kernels_step_aside_off_x86_64_linux_with_glibc(
    fresh, monkeypatch: pytest.MonkeyPatch, caplog, probe, reason
) -> None:
    monkeypatch.setattr(loader, "_platform", lambda: probe)
    monkeypatch.setattr(loader, "build", lambda: pytest.fail("no build where unsupported"))
    with caplog.at_level(logging.WARNING, logger="trinity.kernels"):
        assert kernels.load() is None
        assert kernels.load() is None  # asked again: the answer is kept, not logged again
    lines = [r.getMessage() for r in caplog.records if r.name == "trinity.kernels"]
    assert len(lines) == 1 and reason in lines[0] and "using PyTorch ops" in lines[0]


def test_this_machine_is_supported_where_the_suite_runs() -> None:
    system, machine, libc = loader._platform()
    expected = system == "Linux" and machine in ("x86_64", "AMD64") and libc == "glibc"
    assert (kernels.unsupported_reason() is None) == expected


class _ShapeWithoutScale(ctypes.Structure):
    _fields_ = kernels.DecodeShape._fields_[:-1]  # one field short


class _ShapeWithDoubles(ctypes.Structure):
    _fields_ = kernels.DecodeShape._fields_[:-2] + [
        ("eps", ctypes.c_double),
        ("scale", ctypes.c_double),
    ]


@needs_compiler
@pytest.mark.parametrize("mirror", [_ShapeWithoutScale, _ShapeWithDoubles])
def test_a_decode_shape_mirror_unlike_the_c_struct_turns_the_kernels_off(
    fresh, monkeypatch: pytest.MonkeyPatch, caplog, mirror
) -> None:
    lib = ctypes.CDLL(str(kernels.build()))
    kernels.Kernels(lib)  # the real mirror matches
    with pytest.raises(kernels.KernelBuildError, match="does not match the C decode_shape"):
        kernels.Kernels(lib, mirror)
    monkeypatch.setattr(bindings, "DecodeShape", mirror)
    with caplog.at_level(logging.WARNING, logger="trinity.kernels"):
        assert kernels.load() is None  # and callers take the PyTorch path
    assert "does not match the C decode_shape" in caplog.text
