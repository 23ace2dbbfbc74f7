"""TransformersEngine on the tiny model: exactness against transformers, sampling
controls, request batching across threads, weight swaps."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from trinity.rollout.engine import PromptTooLongError, TransformersEngine
from trinity.rollout.sampling import SamplingParams

PROMPTS = [[1, 4093, 198, 1780, 314], [1, 520, 9531], [1, 30, 31, 32, 33, 34, 35, 36, 37]]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=64) as eng:
        yield eng


@pytest.fixture(scope="module")
def bf16_engine(tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="bfloat16") as eng:
        yield eng


@pytest.fixture(scope="module")
def reference(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, len(prompt) :].tolist()


def recompute_logprobs(model, prompt: list[int], response: list[int], temperature: float):
    """log_softmax(logits / T) at each response token from one full forward pass."""
    ids = torch.tensor([prompt + response])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0].float() / temperature
    logprobs = logits.log_softmax(-1)[len(prompt) - 1 : -1]
    return logprobs.gather(1, torch.tensor(response)[:, None]).squeeze(-1)


def assert_same_samples(got, want):
    """Same tokens; logprobs equal up to float noise from a different batch layout."""
    assert [[s.token_ids for s in g] for g in got] == [[s.token_ids for s in w] for w in want]
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs))


def test_greedy_matches_transformers_generate(engine, reference):
    # three prompts of different lengths decode in one left-padded batch
    results = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=12))
    for prompt, [sample] in zip(PROMPTS, results, strict=True):
        assert sample.token_ids == hf_greedy(reference, prompt, 12)
        assert sample.finish_reason == "length"


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_a_full_forward_recompute(engine, reference, temperature):
    params = SamplingParams(n=2, temperature=temperature, max_tokens=10, seed=3)
    results = engine.generate(PROMPTS, params)
    for prompt, samples in zip(PROMPTS, results, strict=True):
        for sample in samples:
            expected = recompute_logprobs(reference, prompt, sample.token_ids, temperature)
            torch.testing.assert_close(
                torch.tensor(sample.logprobs), expected, atol=1e-4, rtol=1e-4
            )


def test_bf16_logprobs_are_close_to_the_float32_recompute(bf16_engine, reference):
    [[sample]] = bf16_engine.generate([PROMPTS[0]], SamplingParams(max_tokens=10, seed=0))
    assert bf16_engine.model.dtype == torch.bfloat16
    expected = recompute_logprobs(reference, PROMPTS[0], sample.token_ids, 1.0)
    # bf16 keeps about 3 significant digits of logits around 10 in size
    error = (torch.tensor(sample.logprobs) - expected).abs()
    assert error.max() < 0.2 and error.mean() < 0.05


def test_greedy_logprobs_use_temperature_one(engine, reference):
    [[sample]] = engine.generate([PROMPTS[1]], SamplingParams(temperature=0, max_tokens=5))
    expected = recompute_logprobs(reference, PROMPTS[1], sample.token_ids, 1.0)
    torch.testing.assert_close(torch.tensor(sample.logprobs), expected, atol=1e-4, rtol=1e-4)


def test_compute_logprobs_matches_sampling_logprobs(engine):
    params = SamplingParams(n=2, temperature=0.8, max_tokens=7, seed=1)
    results = engine.generate(PROMPTS, params)
    sequences, prompt_lengths, expected = [], [], []
    for prompt, samples in zip(PROMPTS, results, strict=True):
        for sample in samples:
            sequences.append(prompt + sample.token_ids)
            prompt_lengths.append(len(prompt))
            expected.append(sample.logprobs)
    scored = engine.compute_logprobs(sequences, prompt_lengths, temperature=0.8)
    for got, want in zip(scored, expected, strict=True):
        assert len(got) == len(want)
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=1e-4, rtol=1e-4)


def test_n_samples_per_prompt_and_max_tokens(engine):
    results = engine.generate(PROMPTS[:2], SamplingParams(n=4, max_tokens=6, seed=0))
    assert [len(samples) for samples in results] == [4, 4]
    for samples in results:
        for sample in samples:
            assert 1 <= len(sample.token_ids) <= 6
            assert len(sample.logprobs) == len(sample.token_ids)
            assert all(lp <= 0 for lp in sample.logprobs)
            assert sample.finish_reason == ("length" if len(sample.token_ids) == 6 else "stop")
        # near-uniform random model: four samples of six tokens are not all the same
        assert len({tuple(s.token_ids) for s in samples}) > 1


def test_max_model_len_caps_the_response(engine):
    prompt = list(range(10, 60))  # 50 tokens, max_model_len is 64
    [[sample]] = engine.generate([prompt], SamplingParams(temperature=0, ignore_eos=True))
    assert len(sample.token_ids) == 14
    assert sample.finish_reason == "length"


def test_top_k_one_equals_greedy(engine):
    greedy = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=8))
    top1 = engine.generate(PROMPTS, SamplingParams(temperature=1.5, top_k=1, max_tokens=8))
    assert [s[0].token_ids for s in top1] == [s[0].token_ids for s in greedy]


def test_tiny_top_p_equals_greedy(engine):
    greedy = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=8))
    nucleus = engine.generate(PROMPTS, SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=8))
    assert [s[0].token_ids for s in nucleus] == [s[0].token_ids for s in greedy]


def test_same_seed_same_samples(engine):
    params = SamplingParams(n=3, max_tokens=8, seed=1234)
    assert engine.generate(PROMPTS, params) == engine.generate(PROMPTS, params)


def test_stop_token_ids_end_a_sample(engine):
    [[greedy]] = engine.generate([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=10))
    stop = greedy.token_ids[3]
    first = greedy.token_ids.index(stop)
    params = SamplingParams(temperature=0, max_tokens=10, stop_token_ids=[stop])
    [[sample]] = engine.generate([PROMPTS[0]], params)
    assert sample.token_ids == greedy.token_ids[: first + 1]
    assert sample.finish_reason == "stop"


@pytest.fixture(scope="module")
def eos_model(tiny_model_dir, tmp_path_factory, engine) -> tuple[TransformersEngine, list[int]]:
    """The tiny model with its generation config's eos set to the 4th greedy token."""
    [[greedy]] = engine.generate([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=10))
    model_dir = tmp_path_factory.mktemp("eos_model")
    for item in Path(tiny_model_dir).iterdir():
        shutil.copy(item, model_dir / item.name)
    generation = json.loads((model_dir / "generation_config.json").read_text())
    generation["eos_token_id"] = [generation["eos_token_id"], greedy.token_ids[3]]
    (model_dir / "generation_config.json").write_text(json.dumps(generation))
    with TransformersEngine(str(model_dir), dtype="float32") as eos_engine:
        yield eos_engine, greedy.token_ids


def test_eos_from_generation_config_stops(eos_model):
    eos_engine, greedy = eos_model
    first = greedy.index(greedy[3])
    [[sample]] = eos_engine.generate([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=10))
    assert sample.token_ids == greedy[: first + 1]
    assert sample.finish_reason == "stop"

    ignore = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    [[sample]] = eos_engine.generate([PROMPTS[0]], ignore)
    assert sample.token_ids == greedy and sample.finish_reason == "length"


def test_min_tokens_masks_eos(eos_model):
    eos_engine, greedy = eos_model
    eos = greedy[3]
    params = SamplingParams(temperature=0, max_tokens=10, min_tokens=8)
    [[sample]] = eos_engine.generate([PROMPTS[0]], params)
    assert eos not in sample.token_ids[:8]
    assert len(sample.token_ids) >= 8


def test_concurrent_calls_are_merged_into_fewer_batches(tiny_model_dir, engine):
    prompts = [[1, 40 + i, 50 + i, 60 + i][: 2 + i % 3] for i in range(6)]
    params = SamplingParams(temperature=0, max_tokens=6)
    solo = [engine.generate([p], params)[0] for p in prompts]

    with TransformersEngine(str(tiny_model_dir), dtype="float32", batch_window_s=0.5) as batching:
        barrier = threading.Barrier(len(prompts))
        results: list = [None] * len(prompts)

        def call(i: int) -> None:
            barrier.wait()
            results[i] = batching.generate([prompts[i]], params)[0]

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(prompts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert batching.num_batches < len(prompts)
    assert_same_samples(results, solo)


def test_agenerate_calls_share_batches(tiny_model_dir, engine):
    params = SamplingParams(temperature=0, max_tokens=5)
    solo = [engine.generate([p], params)[0] for p in PROMPTS]
    with TransformersEngine(str(tiny_model_dir), dtype="float32", batch_window_s=0.5) as eng:

        async def run_all():
            return await asyncio.gather(*(eng.agenerate([p], params) for p in PROMPTS))

        results = asyncio.run(run_all())
        assert eng.num_batches == 1
    assert_same_samples([r[0] for r in results], solo)


def test_load_state_dict_changes_outputs_and_version(tiny_model_dir, reference):
    params = SamplingParams(temperature=0, max_tokens=8)
    with TransformersEngine(str(tiny_model_dir), dtype="float32") as eng:
        [[before]] = eng.generate([PROMPTS[0]], params)
        assert eng.model_version == 0 and before.model_version == 0

        state = {k: v.clone() for k, v in reference.state_dict().items()}
        generator = torch.Generator().manual_seed(7)
        for tensor in state.values():
            tensor.add_(torch.randn(tensor.shape, generator=generator) * 0.5)
        state.pop("lm_head.weight", None)  # tied to the embeddings, which are present
        eng.load_state_dict(state, version=3)

        [[after]] = eng.generate([PROMPTS[0]], params)
        assert eng.model_version == 3 and after.model_version == 3
        assert after.token_ids != before.token_ids
        with pytest.raises(KeyError, match="unexpected"):
            eng.load_state_dict({"not.a.param": torch.zeros(1)}, version=4)
        assert eng.model_version == 3


def test_prompt_longer_than_max_model_len_is_rejected(engine):
    with pytest.raises(PromptTooLongError, match="max_model_len is 64"):
        engine.generate([list(range(10, 74))], SamplingParams(max_tokens=1))


def test_invalid_sampling_params_are_rejected():
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(max_tokens=2, min_tokens=3)


def test_chat_template_tokens(engine):
    ids = engine.apply_chat_template([{"role": "user", "content": "hi"}])
    text = engine.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_merged_requests_keep_their_own_params(tiny_model_dir, engine, reference):
    # one batch: a greedy request that finishes after 2 tokens, a greedy request that
    # runs on after it is dropped from the batch, a top-k=1 request (greedy in effect),
    # and a seeded sampling request
    seeded = SamplingParams(n=2, max_tokens=6, seed=11)
    alone = engine.generate([PROMPTS[2]], seeded)
    with TransformersEngine(str(tiny_model_dir), dtype="float32", batch_window_s=0.5) as eng:
        short = eng.submit([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=2))
        long = eng.submit(PROMPTS[1:], SamplingParams(temperature=0, max_tokens=10))
        top1 = eng.submit([PROMPTS[0]], SamplingParams(temperature=2.0, top_k=1, max_tokens=5))
        sampled = eng.submit([PROMPTS[2]], seeded)
        results = [f.result() for f in (short, long, top1, sampled)]
        assert eng.num_batches == 1
    short_r, long_r, top1_r, sampled_r = results
    assert short_r[0][0].token_ids == hf_greedy(reference, PROMPTS[0], 2)
    for prompt, [sample] in zip(PROMPTS[1:], long_r, strict=True):
        assert sample.token_ids == hf_greedy(reference, prompt, 10)
    assert top1_r[0][0].token_ids == hf_greedy(reference, PROMPTS[0], 5)
    assert_same_samples(sampled_r, alone)


def test_bf16_greedy_matches_transformers_bf16(bf16_engine, tiny_model_dir):
    reference_bf16 = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    [[sample]] = bf16_engine.generate([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=8))
    assert sample.token_ids == hf_greedy(reference_bf16.eval(), PROMPTS[0], 8)


def test_closed_engine_serves_queued_requests_then_refuses(tiny_model_dir):
    eng = TransformersEngine(str(tiny_model_dir), dtype="float32", batch_window_s=0.2)
    pending = eng.submit([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=3))
    eng.close()
    assert len(pending.result(timeout=10)[0][0].token_ids) == 3
    with pytest.raises(RuntimeError, match="closed"):
        eng.generate([PROMPTS[0]], SamplingParams(max_tokens=1))
