"""trinity.utils.cpu: a CPU without bf16 matmuls runs a bf16 config in float32."""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity.config import load_config
from trinity.utils import cpu

DEMO = Path(__file__).resolve().parents[3] / "examples" / "arithmetic" / "grpo.yaml"


@pytest.mark.parametrize(
    ("flags", "machine", "expected"),
    [
        ({"avx2", "avx512f"}, "x86_64", False),
        ({"avx512f", "avx512_bf16"}, "x86_64", True),
        ({"amx_tile", "amx_bf16"}, "x86_64", True),
        ({"asimd", "bf16"}, "aarch64", True),
        ({"asimd"}, "aarch64", False),
        ({"whatever"}, "riscv64", None),
    ],
)
def test_native_bf16_reads_the_flags(flags: set[str], machine: str, expected: bool | None) -> None:
    assert cpu.native_bf16(flags, machine) is expected


def test_a_cpu_without_bf16_runs_the_bf16_config_in_float32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(cpu.KEEP_BF16, raising=False)
    config = load_config(str(DEMO), [])
    assert config.model.dtype == config.explorer.rollout_model.dtype == "bfloat16"
    note = cpu.float32_where_bf16_is_slow(config, native=False)
    assert note is not None and cpu.KEEP_BF16 in note
    assert config.model.dtype == config.explorer.rollout_model.dtype == "float32"


@pytest.mark.parametrize("case", ["native", "keep", "gpu"])
def test_bf16_stays_where_it_is_fast_or_asked_for(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(cpu.KEEP_BF16, raising=False)
    config = load_config(str(DEMO), [])
    native = case == "native"
    if case == "keep":
        monkeypatch.setenv(cpu.KEEP_BF16, "1")
    if case == "gpu":
        config.cluster.gpu_per_node = 1
    assert cpu.float32_where_bf16_is_slow(config, native=native) is None
    assert config.model.dtype == config.explorer.rollout_model.dtype == "bfloat16"
