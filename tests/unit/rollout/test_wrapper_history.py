"""ModelWrapper history: every call's experiences are kept (in call order) when enabled."""

from __future__ import annotations

import asyncio

import pytest

from trinity.rollout.engine import TransformersEngine
from trinity.rollout.wrapper import ModelWrapper

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=128) as eng:
        yield eng


def test_history_records_every_call_in_order(engine):
    model = ModelWrapper(engine, enable_history=True)
    chat = model.chat(MESSAGES, n=2, max_tokens=3)
    text = model.generate(["The sky is"], max_tokens=3)
    achat = asyncio.run(model.achat(MESSAGES, max_tokens=3))
    ids = asyncio.run(model.agenerate_ids([1, 2, 3], max_tokens=3))
    assert model.extract_experience_from_history(clear_history=False) == chat + text + achat + ids
    assert len(model.extract_experience_from_history()) == 5
    assert model.extract_experience_from_history() == []


def test_history_off_keeps_nothing(engine):
    model = ModelWrapper(engine)
    model.chat(MESSAGES, max_tokens=2)
    assert model.extract_experience_from_history() == []


def test_stop_string_cuts_the_reply(engine):
    model = ModelWrapper(engine)
    [full] = model.chat(MESSAGES, max_tokens=16, temperature=0)
    text = full.response_text
    stop = next(text[i : i + 2] for i in range(1, len(text) - 1) if text[i : i + 2].strip())
    [cut] = model.chat(MESSAGES, max_tokens=16, temperature=0, stop=stop)
    assert cut.response_text == text[: text.find(stop)]
    assert cut.info["finish_reason"] == "stop"
    # the tokens that spell the stop string stay in the sequence (they were sampled)
    assert stop in engine.tokenizer.decode(cut.response_tokens, skip_special_tokens=True)
    assert cut.response_tokens.tolist() == full.response_tokens[: cut.response_length].tolist()
    with pytest.raises(ValueError, match="stop must be"):
        model.chat(MESSAGES, max_tokens=2, stop=[""])


def test_response_limits_apply_to_workflow_calls_only(engine):
    model = ModelWrapper(engine, max_response_tokens=2)
    [limited] = model.chat(MESSAGES, temperature=0, ignore_eos=True)
    [free] = model.chat(MESSAGES, temperature=0, ignore_eos=True, response_limits=False)
    assert limited.response_length == 2
    assert free.response_length == 128 - free.prompt_length  # up to max_model_len


def test_each_experience_keeps_the_temperature_of_its_logprobs(engine):
    model = ModelWrapper(engine)
    [warm] = model.chat(MESSAGES, max_tokens=3, temperature=0.3)
    [greedy] = model.chat(MESSAGES, max_tokens=3, temperature=0)
    assert warm.temperature == 0.3
    assert greedy.temperature == 1.0  # greedy logprobs are taken at T = 1


@pytest.mark.parametrize(("second", "merged"), [(0.3, True), (0.9, False)])
def test_merged_turns_share_one_temperature(engine, second: float, merged: bool):
    model = ModelWrapper(engine, enable_history=True)
    [first] = model.chat(MESSAGES, max_tokens=4, temperature=0.3, ignore_eos=True)
    follow = [*first.messages, {"role": "user", "content": "And 3 + 4?"}]
    model.chat(follow, max_tokens=4, temperature=second, ignore_eos=True)
    exps = model.extract_experience_from_history(merge_turns=True)
    assert len(exps) == (1 if merged else 2)
    assert [e.temperature for e in exps] == ([0.3] if merged else [0.3, second])


def test_a_conversation_samples_every_turn_at_one_temperature(engine):
    from trinity.workflows.conversation import Conversation

    conv = Conversation(ModelWrapper(engine, max_response_tokens=3), MESSAGES)
    asyncio.run(conv.sample(temperature=0.3))
    conv.add({"role": "user", "content": "And 3 + 4?"})
    assert conv.to_experience().temperature == 0.3
    with pytest.raises(ValueError, match=r"temperature 0\.9 after turns sampled at 0\.3"):
        asyncio.run(conv.sample(temperature=0.9))
