"""Every entry point of trinity/kernels checks its arguments before the kernel reads raw
pointers: a bad shape, stride, dtype or index raises ValueError naming the argument,
also under ``python -O`` (the checks are not asserts)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from trinity import kernels

K = kernels.load()
pytestmark = pytest.mark.skipif(K is None, reason="kernels not built (no compiler, or off)")

B, F32, I64 = torch.bfloat16, torch.float32, torch.int64


def z(*shape: int, dtype: torch.dtype = B) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype)


def rope_kv(**change) -> None:
    # rows 2, heads 4, kv_heads 2, dim 8, 5 positions, a cache of 6 columns
    args = dict(
        qkv=z(2, 64),
        positions=torch.tensor([0, 4]),
        cos=z(5, 8),
        sin=z(5, 8),
        q_out=z(2, 4, 8),
        keys=z(2, 2, 6, 8),
        values=z(2, 2, 6, 8),
        column=3,
    )
    K.rope_kv(**(args | change))


def attention(**change) -> None:
    # rows 3, heads 4, kv_heads 2, dim 16, a cache of 10 columns, 2 prompts of 5 columns
    args = dict(q=z(3, 4, 16), keys=z(3, 2, 10, 16), values=z(3, 2, 10, 16), steps=4)
    K.decode_attention(**(args | change))


def prefix(keys=None, values=None, prompt_of=None) -> tuple:
    return (
        z(2, 2, 5, 16) if keys is None else keys,
        z(2, 2, 5, 16) if values is None else values,
        torch.tensor([0, 1, 1]) if prompt_of is None else prompt_of,
    )


def adamw(**change) -> None:
    args = dict(
        master=z(10, dtype=F32),
        exp_avg=z(10, dtype=F32),
        exp_avg_sq=z(10, dtype=F32),
        grad=z(10),
        param=z(10),
    )
    K.adamw_step(**(args | change), lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0, step=1)


CASES: list[tuple[str, Callable[[], object]]] = [
    # add_rms_norm
    ("x", lambda: K.add_rms_norm(z(2, 8, dtype=F32), None, z(8), z(2, 8), 1e-5)),
    ("x", lambda: K.add_rms_norm(z(8, 2).T, None, z(8), z(2, 8), 1e-5)),
    ("weight", lambda: K.add_rms_norm(z(2, 8), None, z(9), z(2, 8), 1e-5)),
    ("out", lambda: K.add_rms_norm(z(2, 8), None, z(8), z(3, 8), 1e-5)),
    ("delta", lambda: K.add_rms_norm(z(2, 8), z(2, 7), z(8), z(2, 8), 1e-5)),
    # rope_kv
    ("positions", lambda: rope_kv(positions=torch.tensor([0, 5]))),
    ("positions", lambda: rope_kv(positions=torch.tensor([-1, 0]))),
    ("positions", lambda: rope_kv(positions=torch.tensor([0, 1, 2]))),
    ("column", lambda: rope_kv(column=6)),
    ("column", lambda: rope_kv(column=-1)),
    ("qkv", lambda: rope_kv(qkv=z(2, 63))),
    ("keys", lambda: rope_kv(keys=z(3, 2, 6, 8), values=z(3, 2, 6, 8))),
    ("values", lambda: rope_kv(values=z(2, 2, 7, 8))),
    ("sin", lambda: rope_kv(sin=z(4, 8))),
    ("cos", lambda: rope_kv(cos=z(5, 8, dtype=F32))),
    # silu_mul, swiglu
    ("gate_up", lambda: K.silu_mul(z(2, 9), z(2, 4))),
    ("up", lambda: K.swiglu_forward(z(3, 4), z(4, 3))),
    ("grad", lambda: K.swiglu_backward(z(3, 5), z(3, 4), z(3, 4))),
    # adamw_step
    ("exp_avg", lambda: adamw(exp_avg=z(9, dtype=F32))),
    ("grad", lambda: adamw(grad=z(10, dtype=torch.float64))),
    ("grad", lambda: adamw(grad=z(11))),
    ("param", lambda: adamw(param=z(10, dtype=F32))),
    ("master", lambda: adamw(master=z(20, dtype=F32)[::2])),
    # rms norm
    ("weight", lambda: K.rms_norm_forward(z(3, 8), z(7), 1e-5)),
    ("rstd", lambda: K.rms_norm_backward(z(3, 8), z(3, 8), z(8), z(4, dtype=F32))),
    ("grad", lambda: K.rms_norm_backward(z(3, 7), z(3, 8), z(8), z(3, dtype=F32))),
    # rope
    ("x", lambda: K.rope(z(4, 5, 8), z(1, 5, 8), z(1, 5, 8))),
    ("x", lambda: K.rope(z(1, 2, 5, 7), z(1, 5, 7), z(1, 5, 7))),
    ("cos", lambda: K.rope(z(1, 2, 5, 8), z(1, 4, 8), z(1, 4, 8))),
    ("like", lambda: K.rope(z(1, 2, 5, 8), z(1, 5, 8), z(1, 5, 8), like=((1, 2, 5, 9), (90, 45, 9, 1)))),
    # sum_squares
    ("t", lambda: K.sum_squares(z(4, dtype=torch.float64))),
    ("t", lambda: K.sum_squares(z(4, 4).T)),
    # logprob_rows and its backward
    ("labels", lambda: K.logprob_rows(z(1, 2, 5), torch.tensor([[0, 5]]), 1.0, False)),
    ("labels", lambda: K.logprob_rows(z(1, 2, 5), torch.tensor([[-1, 0]]), 1.0, False)),
    ("labels", lambda: K.logprob_rows(z(1, 2, 5), torch.tensor([[0, 1, 2]]), 1.0, False)),
    ("logits", lambda: K.logprob_rows(z(1, 2, 5, dtype=F32), z(1, 2, dtype=I64), 1.0, False)),
    ("logits", lambda: K.logprob_rows(z(1, 5, 2).transpose(1, 2), z(1, 2, dtype=I64), 1.0, False)),
    ("temperature", lambda: K.logprob_rows(z(1, 2, 5), z(1, 2, dtype=I64), 0.0, False)),
    ("lse", lambda: K.logprob_rows_backward(z(1, 2, 5), z(1, 2, dtype=I64), z(2, dtype=F32), z(1, 2, dtype=F32), 1.0)),
    ("grad", lambda: K.logprob_rows_backward(z(1, 2, 5), z(1, 2, dtype=I64), z(1, 2, dtype=F32), z(1, 3, dtype=F32), 1.0)),
    # decode_attention
    ("steps", lambda: attention(steps=0)),
    ("steps", lambda: attention(steps=11)),
    ("q", lambda: attention(q=z(3, 16, 4).transpose(1, 2))),
    ("keys", lambda: attention(keys=z(3, 3, 10, 16), values=z(3, 3, 10, 16))),
    ("keys", lambda: attention(keys=z(2, 2, 10, 16), values=z(2, 2, 10, 16))),
    ("keys", lambda: attention(keys=z(3, 2, 16, 10).transpose(2, 3), values=z(3, 2, 16, 10).transpose(2, 3))),
    ("values", lambda: attention(values=z(3, 2, 9, 16))),
    ("values", lambda: attention(values=z(3, 2, 12, 16)[:, :, :10])),
    ("mask", lambda: attention(mask=z(2, 10))),
    ("mask", lambda: attention(mask=z(3, 3))),
    ("mask", lambda: attention(mask=z(3, 10, dtype=F32))),
    ("mask", lambda: attention(mask=z(3, 4), prefix=prefix())),
    ("prompt_of", lambda: attention(prefix=prefix(prompt_of=torch.tensor([0, 2, 1])))),
    ("prompt_of", lambda: attention(prefix=prefix(prompt_of=torch.tensor([0, -1, 1])))),
    ("prompt_of", lambda: attention(prefix=prefix(prompt_of=torch.tensor([0, 1])))),
    ("prefix keys", lambda: attention(prefix=prefix(keys=z(2, 1, 5, 16), values=z(2, 1, 5, 16)))),
    ("prefix values", lambda: attention(prefix=prefix(values=z(2, 2, 4, 16)))),
    # sample_rows
    ("temperature", lambda: K.sample_rows(z(2, 5, dtype=F32), z(3, dtype=F32), z(2, dtype=F32))),
    ("u", lambda: K.sample_rows(z(2, 5, dtype=F32), z(2, dtype=F32), z(2))),
    ("logits", lambda: K.sample_rows(z(2, 0, dtype=F32), z(2, dtype=F32), z(2, dtype=F32))),
    ("logits", lambda: K.sample_rows(z(2, 5), z(2, dtype=F32), z(2, dtype=F32))),
]  # fmt: skip


@pytest.mark.parametrize("name, call", CASES, ids=[f"{i}-{n}" for i, (n, _) in enumerate(CASES)])
def test_a_bad_argument_raises_value_error_naming_it(name: str, call) -> None:
    with pytest.raises(ValueError, match=rf"^{re.escape(name)}:"):
        call()


def test_the_good_arguments_of_the_cases_above_pass() -> None:
    """The cases differ from these calls only in the argument named: the checks reject
    that argument, not the call."""
    rope_kv()
    attention()
    attention(mask=z(3, 10))
    attention(mask=z(2, 5), prefix=prefix())
    adamw()
    K.add_rms_norm(z(2, 8), z(2, 8), z(8), z(2, 8), 1e-5)
    K.logprob_rows_backward(
        z(1, 2, 5), z(1, 2, dtype=I64), z(1, 2, dtype=F32), z(1, 2, dtype=F32), 1.0
    )
    K.sample_rows(z(2, 5, dtype=F32), z(2, dtype=F32), z(2, dtype=F32))


@pytest.mark.skipif(K is None or not K.amx, reason="no AMX tiles on this CPU")
def test_amx_linear_checks_its_inputs() -> None:
    packed = K.amx_pack(z(32, 64))
    with pytest.raises(ValueError, match="^x:"):
        K.amx_linear(z(2, 32), packed)
    with pytest.raises(ValueError, match="^packed:"):
        K.amx_linear(z(2, 64), packed[:, :1])


def test_the_checks_hold_under_python_dash_o() -> None:
    """``python -O`` drops asserts; the checks must still raise."""
    code = (
        "import sys, torch\n"
        "from trinity import kernels\n"
        "K = kernels.load()\n"
        "assert False, 'asserts run'\n"  # removed by -O: the next line proves -O is on
        "print('optimize', sys.flags.optimize)\n"
        "cos = torch.zeros(5, 8, dtype=torch.bfloat16)\n"
        "keys = torch.zeros(2, 2, 6, 8, dtype=torch.bfloat16)\n"
        "try:\n"
        "    K.rope_kv(torch.zeros(2, 64, dtype=torch.bfloat16), torch.tensor([0, 99]), cos,\n"
        "              cos, torch.zeros(2, 4, 8, dtype=torch.bfloat16), keys, keys.clone(), 3)\n"
        "except ValueError as exc:\n"
        "    print('raised', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=300
    )
    assert "optimize 1" in done.stdout, done.stderr
    assert "raised positions: values must lie in [0, 5)" in done.stdout, done.stderr
