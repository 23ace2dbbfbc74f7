"""The pure steps of a wrapper call: sampling parameters, stop strings, packing."""

from __future__ import annotations

import pytest

from trinity.rollout.rollout_calls import (
    PreparedCall,
    before_stop,
    pack_experiences,
    sampling_params,
    stop_strings,
)
from trinity.rollout.sampling import Sample


class CharTokenizer:
    """Token id i is chr(i): decoding is joining characters."""

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(i) for i in ids)


def test_rollout_args_override_the_wrapper_defaults() -> None:
    params = sampling_params(3, {"temperature": 0.5, "top_k": None}, min_tokens=8, max_tokens=64)
    assert (params.n, params.temperature, params.min_tokens, params.max_tokens) == (3, 0.5, 8, 64)
    # a call's max_tokens below the default min_tokens lowers min_tokens to it
    params = sampling_params(1, {"max_tokens": 4}, min_tokens=8, max_tokens=64)
    assert (params.min_tokens, params.max_tokens) == (4, 4)
    with pytest.raises(TypeError, match="unknown rollout_args \\['temprature'\\]"):
        sampling_params(1, {"temprature": 1.0}, min_tokens=1, max_tokens=None)


def test_stop_strings_cut_the_text_before_the_earliest() -> None:
    assert stop_strings("END") == ["END"] and stop_strings(None) == []
    with pytest.raises(ValueError, match="non-empty"):
        stop_strings(["ok", ""])
    assert before_stop("a;b.c", [".", ";"]) == "a"
    assert before_stop("abc", ["."]) == "abc"


def test_packing_cuts_at_the_stop_token_and_keeps_the_prompt() -> None:
    prompt = [ord(c) for c in "Q:"]
    sample = Sample([ord(c) for c in "ab.cd"], [-0.1, -0.2, -0.3, -0.4, -0.5], "length", 7)
    call = PreparedCall([prompt], ["Q:"], [False], sampling_params(1, {}, 1, None), None, ["."])
    [exp] = pack_experiences(CharTokenizer(), call, [[sample]])
    # the tokens up to the one completing "." stay; the text ends before it
    assert exp.tokens.tolist() == prompt + [ord("a"), ord("b"), ord(".")]
    assert exp.logprobs.tolist() == pytest.approx([-0.1, -0.2, -0.3])
    assert exp.response_text == "ab" and exp.prompt_length == 2
    assert exp.info == {"model_version": 7, "finish_reason": "stop", "prompt_truncated": False}
    assert exp.action_mask.tolist() == [True, True, True]
