"""The static decode path on CUDA (continuous batching, CUDA graphs) against the CPU's
reference decode loop: same greedy and seeded tokens, logprobs within float32 noise; each
bucket captured once, none again when the same work comes back.

Marker ``gpu``; skipped where CUDA is absent. ``pytest -n 0 -m gpu tests/gpu``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA device (torch.cuda.is_available() is False here)",
    ),
]

# prompts of very different lengths
PROMPTS = [[1, 4093, 198, 1780, 314], [1, 520], [1, *range(30, 52)], [1, 9, 8, 7]]


@pytest.fixture(scope="module")
def engines(tiny_model_dir: Path):
    from trinity.rollout.engine import TransformersEngine

    with (
        TransformersEngine(str(tiny_model_dir), dtype="float32", decode="reference") as cpu,
        TransformersEngine(
            str(tiny_model_dir), dtype="float32", device="cuda", max_batch_size=2
        ) as cuda,
    ):
        yield cpu, cuda


def assert_same(got, want) -> None:
    assert [s.token_ids for s in got] == [s.token_ids for s in want]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
        )


def test_cuda_takes_the_static_path_with_graphs(engines) -> None:
    from trinity.rollout.sampling import SamplingParams

    _, cuda = engines
    assert cuda.decode_mode == "static" and cuda._continuous is not None
    cuda.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=4))
    assert cuda._continuous.graphs.captures > 0
    assert cuda._continuous.cache.keys.device.type == "cuda"


def test_greedy_rows_equal_the_cpu_reference(engines) -> None:
    from trinity.rollout.sampling import SamplingParams

    cpu, cuda = engines
    for max_tokens in (1, 5, 40):  # 8 rows through 2 slots
        params = SamplingParams(temperature=0, max_tokens=max_tokens, n=2, ignore_eos=True)
        for got, want in zip(
            cuda.generate(PROMPTS, params), cpu.generate(PROMPTS, params), strict=True
        ):
            assert_same(got, want)


def test_seeded_one_row_requests_equal_the_cpu_reference(engines) -> None:
    from trinity.rollout.sampling import SamplingParams

    cpu, cuda = engines
    params = [
        SamplingParams(temperature=1.0, max_tokens=16, seed=1),
        SamplingParams(temperature=0.7, max_tokens=24, seed=2, top_k=40),
        SamplingParams(temperature=1.0, max_tokens=9, seed=3, top_p=0.9, min_tokens=4),
    ]
    futures = [cuda.submit([PROMPTS[i]], p) for i, p in enumerate(params)]
    for i, (future, p) in enumerate(zip(futures, params, strict=True)):
        assert_same(future.result()[0], cpu.generate([PROMPTS[i]], p)[0])


def test_no_capture_when_the_same_work_comes_back(engines) -> None:
    from trinity.rollout.sampling import SamplingParams

    _, cuda = engines
    params = SamplingParams(temperature=1.0, max_tokens=48, n=3, ignore_eos=True)
    cuda.generate(PROMPTS, params)
    captures = cuda._continuous.graphs.captures
    for _ in range(2):
        cuda.generate(PROMPTS, params)
    assert cuda._continuous.graphs.captures == captures
