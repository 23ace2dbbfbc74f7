"""The GPU benchmarks of scripts/gpu_check.sh run on the CPU with their tiny settings and
print every figure they promise (the GPU runs them at full size)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def run_script(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_gpu_scale_tiny_on_cpu() -> None:
    out = run_script("gpu_scale.py", "--device", "cpu", "--tiny", "--steps", "2", "--no-trl")
    assert "work: 4 prompts x 2 rollouts, 8 new tokens" in out
    assert out.count("64 tokens generated") == 2  # 2 timed steps, every row to its end
    for line in ("step median", "rollout median", "train median", "sync median"):
        assert line in out and "max/median" in out.split(line)[1].splitlines()[0]
    assert "% of the bf16 matmul peak" in out and "tokens/s -> " in out
    assert "trl baseline: skipped (--no-trl)" in out


def test_decode_paths_tiny_on_cpu() -> None:
    out = run_script("decode_paths.py", "--tiny", "--rows", "2", "--tokens", "4", "--repeats", "1")
    lines = [line for line in out.splitlines() if "tokens/s" in line]
    assert [line.split()[:2] for line in lines] == [
        ["reference", "uniform:"],
        ["reference", "mixed"],
        ["static", "uniform:"],
        ["static", "mixed"],
    ]
    assert all("0 captures after the warm-up" in line for line in lines[2:])
