"""ModelWrapper on the tiny model: Experience shapes, texts, truncation, async calls."""

from __future__ import annotations

import asyncio

import pytest
import torch

from trinity.rollout.engine import PromptTooLongError, TransformersEngine
from trinity.rollout.wrapper import ModelWrapper

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=128) as eng:
        yield eng


@pytest.fixture
def model(engine):
    return ModelWrapper(engine)


def test_chat_returns_one_consistent_experience_per_sample(model, engine):
    experiences = model.chat(MESSAGES, n=3, max_tokens=9, temperature=1.0, seed=0)
    prompt = engine.apply_chat_template(MESSAGES)
    assert len(experiences) == 3
    for exp in experiences:
        response = exp.tokens[exp.prompt_length :]
        assert exp.tokens.dtype == torch.long
        assert exp.tokens[: exp.prompt_length].tolist() == prompt
        assert 1 <= exp.response_length <= 9
        assert exp.logprobs.dtype == torch.float32 and exp.logprobs.shape == (exp.response_length,)
        assert exp.action_mask.dtype == torch.bool and bool(exp.action_mask.all())
        assert exp.action_mask.shape == (exp.response_length,)
        assert exp.prompt_text == engine.tokenizer.decode(prompt)
        assert exp.response_text == engine.tokenizer.decode(response, skip_special_tokens=True)
        assert exp.messages == [*MESSAGES, {"role": "assistant", "content": exp.response_text}]
        assert exp.info["model_version"] == 0 == exp.model_version
    assert MESSAGES == [{"role": "user", "content": "What is 2 + 3?"}]  # input left untouched


def test_generate_keeps_prompt_order(model, engine):
    prompts = ["The sky is", "One, two,"]
    experiences = model.generate(prompts, n=2, max_tokens=4, temperature=0)
    assert [e.prompt_text for e in experiences] == [prompts[0]] * 2 + [prompts[1]] * 2
    for exp, text in zip(experiences, [prompts[0]] * 2 + [prompts[1]] * 2, strict=True):
        assert exp.tokens[: exp.prompt_length].tolist() == engine.tokenizer(text)["input_ids"]
        assert exp.messages is None
    # greedy: both samples of a prompt are the same
    assert torch.equal(experiences[0].tokens, experiences[1].tokens)


def test_async_calls_equal_sync_calls(model):
    sync = model.chat(MESSAGES, max_tokens=6, temperature=0)
    exps = asyncio.run(model.achat(MESSAGES, max_tokens=6, temperature=0))
    assert torch.equal(exps[0].tokens, sync[0].tokens)
    completions = asyncio.run(model.agenerate(["Hello"], max_tokens=3, temperature=0))
    assert torch.equal(
        completions[0].tokens, model.generate(["Hello"], max_tokens=3, temperature=0)[0].tokens
    )


def test_logprobs_match_the_rollout_logprobs(model):
    [exp] = model.chat(MESSAGES, max_tokens=6, temperature=1.0, seed=5)
    scored = model.logprobs(exp.tokens)
    assert scored.shape == (exp.tokens.numel() - 1,)
    torch.testing.assert_close(scored[exp.prompt_length - 1 :], exp.logprobs, atol=1e-4, rtol=1e-4)


def test_defaults_and_rollout_args(engine):
    model = ModelWrapper(engine, max_response_tokens=3)
    assert all(e.response_length <= 3 for e in model.chat(MESSAGES, n=2))
    assert all(e.response_length <= 5 for e in model.chat(MESSAGES, max_tokens=5, logprobs=True))
    with pytest.raises(TypeError, match="unknown rollout_args"):
        model.chat(MESSAGES, beam_width=2)


def test_long_prompt_is_truncated_and_masked_when_enabled(engine):
    model = ModelWrapper(engine, max_prompt_tokens=8, enable_prompt_truncation=True)
    prompt = engine.apply_chat_template(MESSAGES)
    [exp] = model.chat(MESSAGES, max_tokens=4)
    assert exp.prompt_length == 8
    assert exp.tokens[:8].tolist() == prompt[-8:]  # the end, with the assistant header, stays
    assert not bool(exp.action_mask.any())
    assert exp.info["prompt_truncated"] is True


def test_long_prompt_is_rejected_without_truncation(model):
    long_messages = [{"role": "user", "content": "word " * 200}]
    with pytest.raises(PromptTooLongError, match="enable_prompt_truncation"):
        model.chat(long_messages)


def test_model_version_follows_the_engine(tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="float32") as eng:
        model = ModelWrapper(eng)
        eng.load_state_dict(dict(eng.model.state_dict()), version=2)
        assert model.model_version == 2
        assert model.chat(MESSAGES, max_tokens=2)[0].info["model_version"] == 2
