"""The fused Llama decoder against transformers' forward, on the tiny model: same tokens
and logprobs, rows finishing at different times, weight swaps, seeds, cache growth."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from trinity.rollout import decode_batch, fast_decode
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.fast_decode import LlamaDecoder, unsupported_reason
from trinity.rollout.sampling import SamplingParams

PROMPTS = [[1, 4093, 198, 1780, 314], [1, 520, 9531], [1, 30, 31, 32, 33, 34, 35, 36, 37]]
# bf16 logits differ in rounding between the two paths (packed fused matmuls, the decode
# attention kernel's sums in another order than SDPA's: each as far from float64 as the
# other, see test_cpu_kernels.py)
TOLERANCE = {"float32": 1e-4, "bfloat16": 4e-2}
# a full forward (scoring) vs one token at a time over a bf16 KV cache: bf16 keeps about
# 3 significant digits of logits around 10 in size
SCORING = {"float32": 1e-4, "bfloat16": 0.1}


def engines(model_dir, dtype: str) -> tuple[TransformersEngine, TransformersEngine]:
    fast = TransformersEngine(str(model_dir), dtype=dtype, max_model_len=96)
    slow = TransformersEngine(str(model_dir), dtype=dtype, max_model_len=96, fast_decode=False)
    return fast, slow


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def pair(request, tiny_model_dir):
    fast, slow = engines(tiny_model_dir, request.param)
    yield fast, slow, request.param
    fast.close()
    slow.close()


def assert_same(got, want, tolerance: float) -> None:
    assert [[s.token_ids for s in g] for g in got] == [[s.token_ids for s in w] for w in want]
    assert [[s.finish_reason for s in g] for g in got] == [
        [s.finish_reason for s in w] for w in want
    ]
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            torch.testing.assert_close(
                torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=tolerance, rtol=0
            )


def test_paths_are_chosen_per_model(pair):
    fast, slow, _ = pair
    assert fast.decode_path == "fused-llama" and slow.decode_path == "transformers"
    # q / k / v stay views of the fused weight: no extra copy of the model's weights
    layer = fast.model.model.layers[0].self_attn
    fused = fast._fast.layers[0].weights[0]
    assert layer.q_proj.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    assert layer.v_proj.weight.data_ptr() > layer.k_proj.weight.data_ptr() > fused.data_ptr()


def test_unsupported_models_keep_the_transformers_forward(caplog):
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, vocab_size=100)
    small |= dict(num_attention_heads=2, num_key_value_heads=1)
    assert unsupported_reason(LlamaForCausalLM(LlamaConfig(**small))) is None
    with caplog.at_level(logging.DEBUG, logger="trinity.rollout.fast_decode"):
        assert LlamaDecoder.for_model(LlamaForCausalLM(LlamaConfig(**small)), 16) is not None
        assert LlamaDecoder.for_model(Qwen2ForCausalLM(Qwen2Config(**small)), 16) is None
    assert "decode path: fused Llama decoder" in caplog.text
    assert "decode path: transformers forward (architecture Qwen2ForCausalLM" in caplog.text
    scaled = LlamaConfig(**small, rope_scaling={"rope_type": "linear", "factor": 2.0})
    assert "rope scaling 'linear'" in unsupported_reason(LlamaForCausalLM(scaled))
    biased = LlamaConfig(**small, attention_bias=True)
    assert "biases" in unsupported_reason(LlamaForCausalLM(biased))
    assert "Qwen2ForCausalLM" in unsupported_reason(Qwen2ForCausalLM(Qwen2Config(**small)))


def test_greedy_equals_transformers_path(pair):
    fast, slow, dtype = pair
    params = SamplingParams(n=2, temperature=0, max_tokens=16)
    assert_same(fast.generate(PROMPTS, params), slow.generate(PROMPTS, params), TOLERANCE[dtype])


def test_seeded_sampling_equals_transformers_path_and_repeats(pair, monkeypatch):
    fast, slow, dtype = pair
    # the tiny random model's next-token distributions are nearly flat: a bf16 rounding
    # of attention in another order moves some draws to a neighbouring token. Sampling is
    # compared with SDPA here; the kernel's tokens are compared greedily below.
    monkeypatch.setattr(fast_decode, "C_STEP", False)
    params = SamplingParams(n=3, temperature=0.8, top_p=0.9, max_tokens=12, seed=5)
    first = fast.generate(PROMPTS, params)
    assert_same(fast.generate(PROMPTS, params), first, 0.0)
    assert_same(first, slow.generate(PROMPTS, params), TOLERANCE[dtype])
    assert len({tuple(s.token_ids) for s in first[0]}) > 1  # the n samples differ


def test_sampling_logprobs_equal_compute_logprobs(pair):
    fast, _, dtype = pair
    params = SamplingParams(n=2, temperature=0.7, max_tokens=10, seed=2)
    samples = [
        (p, s)
        for p, group in zip(PROMPTS, fast.generate(PROMPTS, params), strict=True)
        for s in group
    ]
    scored = fast.compute_logprobs(
        [p + s.token_ids for p, s in samples], [len(p) for p, _ in samples], temperature=0.7
    )
    for (_, sample), logprobs in zip(samples, scored, strict=True):
        torch.testing.assert_close(
            torch.tensor(sample.logprobs), torch.tensor(logprobs), atol=SCORING[dtype], rtol=0
        )


def test_rows_finishing_at_different_times_match(pair):
    fast, slow, dtype = pair
    greedy = slow.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=12))
    # a token the first prompt's greedy answer reaches early ends its rows there
    stop = greedy[0][0].token_ids[3]
    # bf16 draws are compared greedily: the C step's attention and sampler sum in another
    # order than SDPA and torch, which moves draws near a token boundary (see
    # test_seeded_sampling_equals_transformers_path_and_repeats)
    temperature = 1.0 if dtype == "float32" else 0.0
    requests = [
        (PROMPTS, SamplingParams(n=2, temperature=0, max_tokens=12, stop_token_ids=[stop])),
        (PROMPTS[:2], SamplingParams(n=3, temperature=temperature, max_tokens=7, seed=1)),
        (
            PROMPTS[1:],
            SamplingParams(temperature=0, max_tokens=9, min_tokens=6, stop_token_ids=[stop]),
        ),
    ]
    for prompts, params in requests:
        # submitted together, so they usually share one decode batch
        futures = [engine.submit(prompts, params) for engine in (fast, slow)]
        got, want = (future.result() for future in futures)
        assert_same(got, want, TOLERANCE[dtype])
    stopped = fast.generate(*requests[0])
    assert stopped[0][0].finish_reason == "stop" and len(stopped[0][0].token_ids) <= 4
    assert {len(s.token_ids) for group in fast.generate(*requests[1]) for s in group} == {7}


def test_long_prompts_match(pair):
    # 3 prompts of up to 88 tokens: the prefill (264 rows) takes the plain matmul
    prompts = [list(range(100, 188)), list(range(300, 350)), list(range(500, 580))]
    params = SamplingParams(n=2, temperature=0, max_tokens=4)
    fast, slow, dtype = pair
    assert_same(fast.generate(prompts, params), slow.generate(prompts, params), TOLERANCE[dtype])


def test_cache_grows_past_its_first_allocation(pair, monkeypatch):
    fast, slow, dtype = pair
    monkeypatch.setattr(decode_batch, "_FIRST_CAPACITY", 3)  # doubled twice over 20 tokens
    params = SamplingParams(n=2, temperature=0, max_tokens=20)
    assert_same(fast.generate(PROMPTS, params), slow.generate(PROMPTS, params), TOLERANCE[dtype])


def test_weight_swap_reaches_the_fused_weights(tiny_model_dir):
    for dtype in ("float32", "bfloat16"):
        fast, slow = engines(tiny_model_dir, dtype)
        params = SamplingParams(n=2, temperature=0, max_tokens=10)
        before = fast.generate(PROMPTS, params)
        torch.manual_seed(1)
        other = AutoModelForCausalLM.from_config(fast.model.config)
        state = {k: v.to(fast.model.dtype) for k, v in other.state_dict().items()}
        for engine in (fast, slow):
            engine.load_state_dict(state, version=1)
        after = fast.generate(PROMPTS, params)
        assert [s.token_ids for s in after[0]] != [s.token_ids for s in before[0]]
        assert_same(after, slow.generate(PROMPTS, params), TOLERANCE[dtype])
        # scoring sees the same new weights as decoding
        scored = fast.compute_logprobs([PROMPTS[0] + after[0][0].token_ids], [len(PROMPTS[0])])
        torch.testing.assert_close(
            torch.tensor(after[0][0].logprobs), torch.tensor(scored[0]), atol=SCORING[dtype], rtol=0
        )
        # the top-1 of compute_top_logprobs bounds the greedy tokens' scored logprobs and,
        # in float32 (no near-tie flips between decode and full forward), is those tokens
        top = fast.compute_top_logprobs(PROMPTS[0] + after[0][0].token_ids, len(PROMPTS[0]), k=1)
        assert all(t[0][1] >= lp - 1e-5 for t, lp in zip(top, scored[0], strict=True))
        if dtype == "float32":
            assert [t[0][0] for t in top] == after[0][0].token_ids
            torch.testing.assert_close(
                torch.tensor([t[0][1] for t in top]), torch.tensor(scored[0]), atol=1e-5, rtol=0
            )
        fast.close()
        slow.close()


@pytest.mark.parametrize("kept", [[1, 3], [0, 1, 3], [0, 1, 2]])
def test_dropped_rows_leave_the_others_unchanged(pair, kept):
    fast, _, dtype = pair
    ids = torch.tensor([[0, 0, 1, 4093, 198], [1, 520, 9531, 30, 31], [0, 1, 30, 31, 32]])
    mask = (torch.arange(5) >= torch.tensor([[2], [0], [1]])).long()
    rows = torch.tensor([0, 1, 2, 1])
    steps = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    with torch.inference_mode():
        batch, _ = fast._fast.start(ids, mask, rows, new_tokens=3)
        batch.step(steps[0])
        batch.keep(torch.tensor(kept))
        got = batch.step(steps[1, kept])
        alone, _ = fast._fast.start(ids, mask, rows[kept], new_tokens=3)
        alone.step(steps[0, kept])
        want = alone.step(steps[1, kept])
    torch.testing.assert_close(got, want, atol=TOLERANCE[dtype], rtol=0)


def test_amx_matmuls_give_the_onednn_tokens_and_logprobs(tiny_model_dir):
    from trinity import kernels

    lib = kernels.load()
    if lib is None or not lib.amx:
        pytest.skip("no AMX tiles on this CPU (or no kernels): the oneDNN path runs")
    with TransformersEngine(str(tiny_model_dir), dtype="bfloat16", max_model_len=96) as engine:
        decoder = engine._fast
        assert decoder.amx  # every weight of the tiny model fits the tiles
        params = SamplingParams(n=3, max_tokens=12, temperature=0, ignore_eos=True)
        with_amx = engine.generate(PROMPTS, params)
        engine.run_in_worker(lambda: setattr(decoder, "amx", False) or decoder.refresh())
        with_onednn = engine.generate(PROMPTS, params)
    # exact bf16 products summed in float32 in the tiles' order, not oneDNN's (which
    # depends on the CPU and oneDNN's kernel choice), then rounded once: logits within
    # bf16 rounding of each other, so greedy tokens agree but for near ties
    assert_same(with_amx, with_onednn, TOLERANCE["bfloat16"])


def test_without_the_kernels_the_bf16_decoder_runs_the_pytorch_ops(tiny_model_dir, monkeypatch):
    """The plain path (kernels.load() returning None): the fused decoder's Python layer
    loop with PyTorch's norm, rotary, SiLU, SDPA and the tensor sampler."""
    monkeypatch.setattr(fast_decode.kernels, "load", lambda: None)
    fast, slow = engines(tiny_model_dir, "bfloat16")
    try:
        decoder = fast._fast
        assert fast.decode_path == "fused-llama" and decoder.kernels is None
        assert not decoder.amx and not decoder.c_step and decoder.sampler is None
        params = SamplingParams(n=2, temperature=0, max_tokens=12)
        want = slow.generate(PROMPTS, params)
        assert_same(fast.generate(PROMPTS, params), want, TOLERANCE["bfloat16"])
    finally:
        fast.close()
        slow.close()


def test_the_c_decode_step_gives_the_python_loops_tokens(tiny_model_dir):
    """The bf16 decode step with the attention kernel (and, with AMX, its whole layer loop
    in C) against the Python layer loop with SDPA: the same samples, logprobs within the
    rounding of two bf16 attention orders."""
    with TransformersEngine(str(tiny_model_dir), dtype="bfloat16", max_model_len=96) as engine:
        if engine._fast is None or engine._fast.kernels is None:
            pytest.skip("no fused kernels: decode steps run the PyTorch ops")
        params = SamplingParams(n=3, max_tokens=12, temperature=0, ignore_eos=True)
        kernel = engine.generate(PROMPTS, params)
        try:
            fast_decode.C_STEP = False
            python = engine.generate(PROMPTS, params)
        finally:
            fast_decode.C_STEP = True
    assert_same(kernel, python, TOLERANCE["bfloat16"])
