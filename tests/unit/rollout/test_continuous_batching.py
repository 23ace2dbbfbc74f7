"""The static decode path (continuous batching over a static KV cache) against the
reference decode loop, on the CPU: same tokens, logprobs up to float rounding; bucket
bookkeeping and one capture per bucket key."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from trinity.rollout.continuous_batching import ContinuousDecoder, decode_mode, row_generators
from trinity.rollout.decoding import DecodeEntry
from trinity.rollout.device_sampler import filter_width, sample_on_device
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.sampling import SamplingParams, sample_tokens
from trinity.rollout.slot_cache import bucket, cache_capacity, column_bucket
from trinity.rollout.step_graphs import eager

# prompts of very different lengths
PROMPTS = [[1, 4093, 198, 1780, 314], [1, 520], [1, *range(30, 52)], [1, 9, 8, 7]]


@pytest.fixture(scope="module")
def reference(tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="float32", decode="reference") as eng:
        yield eng


@pytest.fixture(scope="module")
def static(tiny_model_dir):
    # 2 slots: most calls below have more rows than slots
    with TransformersEngine(
        str(tiny_model_dir), dtype="float32", decode="static", max_batch_size=2
    ) as eng:
        yield eng


def assert_same(got, want) -> None:
    """Same tokens and finish reasons; logprobs equal up to float rounding (the rows
    share their matmuls with other rows)."""
    assert [(s.token_ids, s.finish_reason) for s in got] == [
        (s.token_ids, s.finish_reason) for s in want
    ]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs))


def test_engines_take_the_paths_asked_for(reference, static):
    assert (reference.decode_mode, static.decode_mode) == ("reference", "static")
    assert reference._continuous is None and static._continuous is not None


def test_greedy_rows_of_very_different_lengths_and_more_rows_than_slots(reference, static):
    """4 prompts x 2 rows = 8 rows through 2 slots; budgets from 1 to 40 tokens."""
    for max_tokens in (1, 3, 40):
        params = SamplingParams(temperature=0, max_tokens=max_tokens, n=2, ignore_eos=True)
        got = static.generate(PROMPTS, params)
        want = reference.generate(PROMPTS, params)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)
            assert all(len(s.token_ids) == max_tokens for s in g)


def test_seeded_one_row_requests_sample_as_alone(reference, static):
    """Requests of one row each with its own seed, merged into one static batch (2
    slots, so later rows join as earlier ones finish), sample what each samples alone
    on the reference path: top-k, top-p, min_tokens and temperatures mixed."""
    params = [
        SamplingParams(temperature=1.0, max_tokens=12, seed=1),
        SamplingParams(temperature=0.7, max_tokens=30, seed=2, top_k=40),
        SamplingParams(temperature=1.0, max_tokens=5, seed=3, top_p=0.9),
        SamplingParams(temperature=0.8, max_tokens=20, seed=4, top_k=50, top_p=0.8),
        SamplingParams(temperature=1.0, max_tokens=9, seed=5, min_tokens=4),
        SamplingParams(temperature=0, max_tokens=7),
    ]
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(len(params))]

    async def merged():
        return await asyncio.gather(
            *(static.agenerate([p], sp) for p, sp in zip(prompts, params, strict=True))
        )

    batches = static.num_batches
    got = asyncio.run(merged())
    assert static.num_batches - batches < len(params)  # some were merged
    for g, prompt, sp in zip(got, prompts, params, strict=True):
        assert_same(g[0], reference.generate([prompt], sp)[0])


def test_a_request_queued_during_a_run_takes_a_freed_slot_and_returns_first(
    tiny_model_dir, reference
):
    """A short request submitted while a long one decodes joins the same run in the free
    slot and is answered while the long one still runs; both as on the reference path."""
    with TransformersEngine(
        str(tiny_model_dir), dtype="float32", decode="static", max_batch_size=2, batch_window_s=0
    ) as engine:
        long = SamplingParams(temperature=0, max_tokens=300, ignore_eos=True)
        short = SamplingParams(temperature=1.0, max_tokens=5, seed=9)
        engine.generate([PROMPTS[1]], short)  # the cache exists: no delay below
        engine.run_in_worker(lambda: None)  # after that run's end
        first_run, steps = engine.num_batches, engine._continuous.steps
        slow = engine.submit([PROMPTS[0]], long)
        while engine._continuous.steps < steps + 9:
            time.sleep(0.001)  # until the long row is past its first host read
        fast = engine.submit([PROMPTS[1]], short)
        got = fast.result(timeout=60)
        assert not slow.done()
        assert engine.num_batches == first_run + 1  # one run for both
        assert_same(got[0], reference.generate([PROMPTS[1]], short)[0])
        assert_same(slow.result()[0], reference.generate([PROMPTS[0]], long)[0])


def test_stop_token_ids_and_eos_end_rows_as_on_the_reference_path(reference, static):
    greedy = reference.generate([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=10))
    stop = greedy[0][0].token_ids[3]
    params = SamplingParams(temperature=0, max_tokens=10, n=3, stop_token_ids=[stop])
    got, want = static.generate(PROMPTS, params), reference.generate(PROMPTS, params)
    for g, w in zip(got, want, strict=True):
        assert_same(g, w)
    assert got[0][0].finish_reason == "stop" and got[0][0].token_ids[-1] == stop


def test_stop_strings_cut_the_same_responses(reference, static):
    from trinity.rollout.wrapper import ModelWrapper

    prompt = PROMPTS[2]
    text = reference.tokenizer.decode(
        reference.generate([prompt], SamplingParams(temperature=0, max_tokens=12))[0][0].token_ids
    )
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    runs = []
    for engine in (reference, static):
        wrapper = ModelWrapper(engine, max_response_tokens=12)
        runs.append(wrapper.generate([prompt], n=2, temperature=0, stop=[stop]))
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a.tokens, b.tokens)
        torch.testing.assert_close(a.logprobs, b.logprobs)
    assert len(runs[1][0].tokens) - runs[1][0].prompt_length < 12


@pytest.mark.slow
def test_real_smollm2_greedy_matches(smollm2_dir):
    """The built-in SmolLM2-135M in float32: a few greedy tokens of two prompts."""
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    samples = []
    for mode in ("reference", "static"):
        with TransformersEngine(str(smollm2_dir), dtype="float32", decode=mode) as engine:
            prompt = engine.apply_chat_template([{"role": "user", "content": "What is 2+3?"}])
            samples.append(engine.generate([prompt, prompt[:5]], params))
    for g, w in zip(*samples, strict=True):
        assert_same(g, w)


def test_buckets():
    assert [bucket(n, 64) for n in (1, 2, 3, 5, 33, 64, 100)] == [1, 2, 4, 8, 64, 64, 64]
    assert bucket(5, 6) == 6  # capped at the slots there are
    # columns: at least 64, powers of two, at most the capacity
    assert [column_bucket(n, 512) for n in (1, 64, 65, 300, 600)] == [64, 64, 128, 512, 512]
    # a cache: multiples of 256 columns (a 1.7B model's 256 rows of 612 columns: 768)
    assert [cache_capacity(n, 2048) for n in (1, 256, 257, 612, 5000)] == [256, 256, 512, 768, 2048]
    assert column_bucket(700, cache_capacity(612, 2048)) == 768


def test_each_bucket_key_is_captured_once(static):
    """A counting capture function: a second identical run captures nothing new, and
    every capture was of a distinct key."""
    keys: list = []
    captured: list = []

    def capture(step):  # what cuda_graph_capture is on a GPU: called once per graph
        captured.append(step)
        return step

    decoder = ContinuousDecoder(static._fast, max_slots=4, capture=capture)
    original = decoder.graphs.run

    def run(key, step):
        if key not in decoder.graphs._replays:
            keys.append(key)
        original(key, step)

    decoder.graphs.run = run

    def decode() -> list:
        entries = [
            DecodeEntry(p, SamplingParams(temperature=0, max_tokens=m, ignore_eos=True), None, 0)
            for p, m in zip(PROMPTS, (3, 70, 9, 17), strict=True)
        ]
        generators = [row_generators(None, 1, torch.Generator()) for _ in entries]
        return decoder.decode(entries, generators, 2048, 0, set(), 0)

    first = decode()
    assert len(captured) == decoder.graphs.captures == len(keys) == len(set(keys)) > 1
    # 4 rows in 4 slots: rows drain (rows bucket 4 -> 2 -> 1 by compaction) as columns grow
    assert {k[0] for k in keys} == {4, 2, 1}
    assert {k[1] for k in keys} >= {64, 128}
    before = len(captured)
    second = decode()
    assert len(captured) == before  # same buckets: nothing captured again
    assert [[s.token_ids for s in g] for g in first] == [[s.token_ids for s in g] for g in second]


def test_cancelled_rows_free_their_slots(static):
    """A request cancelled before it starts gets no tokens; one cancelled while decoding
    stops at the next host read; the others decode as if alone."""
    decoder = ContinuousDecoder(static._fast, max_slots=2, capture=eager, sync_every=4)
    reads = iter(range(1000))
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    entries = [
        DecodeEntry(PROMPTS[0], params, None, 0, cancelled=lambda: True),
        DecodeEntry(PROMPTS[1], params, None, 1, cancelled=lambda: next(reads) >= 2),
        DecodeEntry(PROMPTS[2], params, None, 2),
    ]
    generators = [row_generators(None, 1, torch.Generator()) for _ in entries]
    never, cut, whole = decoder.decode(entries, generators, 2048, 0, set(), 0)
    assert never[0].token_ids == []
    assert 0 < len(cut[0].token_ids) < 40
    assert whole[0].token_ids == static.generate([PROMPTS[2]], params)[0][0].token_ids


def test_device_sampler_draws_what_sample_tokens_draws():
    """Same logits, same uniform numbers: the same tokens and logprobs as the reference
    sampler, with greedy, top-k, top-p and banned rows mixed."""
    torch.manual_seed(0)
    logits = torch.randn(6, 1000) * 3
    temperature = torch.tensor([1.0, 0.0, 0.7, 1.0, 0.5, 1.0])
    top_k = torch.tensor([-1, -1, 20, -1, 5, 100])
    top_p = torch.tensor([1.0, 1.0, 1.0, 0.9, 0.8, 1.0])
    banned = torch.zeros(6, 1000, dtype=torch.bool)
    banned[0, logits[0].argmax()] = True
    seed = 11
    want = sample_tokens(
        logits,
        temperature,
        top_k,
        top_p,
        [(torch.tensor([i]), torch.Generator().manual_seed(seed + i)) for i in range(6)],
        banned,
    )
    u = torch.tensor(
        [float(torch.rand(1, generator=torch.Generator().manual_seed(seed + i))) for i in range(6)]
    )
    params = [
        SamplingParams(top_k=int(k), top_p=float(p)) for k, p in zip(top_k, top_p, strict=True)
    ]
    width = filter_width(params, 1000)
    assert width == 1000  # a top-p row without a top-k: the whole vocabulary
    got = sample_on_device(logits, temperature, top_k, top_p, u, banned, width)
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=1e-6)


def test_filter_width():
    assert filter_width([SamplingParams()], 500) is None
    # powers of two: top-k 80 and 100 share a captured step
    assert filter_width([SamplingParams(top_k=10), SamplingParams(top_k=80)], 500) == 128
    assert filter_width([SamplingParams(top_k=100)], 500) == 128
    assert filter_width([SamplingParams(top_k=300)], 500) == 500
    assert filter_width([SamplingParams(top_k=3, top_p=0.5)], 500) == 64
    assert filter_width([SamplingParams(top_k=3), SamplingParams(top_p=0.5)], 500) == 500


def test_row_generators():
    first, second = row_generators(7, 2, torch.Generator())
    same = torch.Generator().manual_seed(7)
    assert torch.equal(torch.rand(4, generator=first), torch.rand(4, generator=same))
    assert not torch.equal(torch.rand(4, generator=second), torch.rand(4, generator=first))


def test_graphs_can_be_turned_off(monkeypatch):
    from trinity.rollout.step_graphs import graphs_enabled

    monkeypatch.delenv("TRINITY_DECODE_GRAPHS", raising=False)
    assert graphs_enabled()
    monkeypatch.setenv("TRINITY_DECODE_GRAPHS", "0")
    assert not graphs_enabled()


def test_decode_mode(monkeypatch, static):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv("TRINITY_DECODE", raising=False)
    assert decode_mode(None, cpu, static._fast) == "reference"
    assert decode_mode(None, cuda, static._fast) == "static"
    assert decode_mode(None, cuda, None) == "reference"  # not a Llama-family model
    monkeypatch.setenv("TRINITY_DECODE", "static")
    assert decode_mode(None, cpu, static._fast) == "static"
    assert decode_mode("reference", cpu, static._fast) == "reference"
    monkeypatch.setenv("TRINITY_DECODE", "fast")
    with pytest.raises(ValueError, match="TRINITY_DECODE must be one of"):
        decode_mode(None, cpu, static._fast)
