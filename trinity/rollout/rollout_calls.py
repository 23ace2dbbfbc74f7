"""What a :class:`~trinity.rollout.wrapper.ModelWrapper` call sends to the engine and
what it makes of the samples: sampling parameters from ``rollout_args``, stop strings,
and one :class:`~trinity.types.Experience` per sample.

    params = sampling_params(4, {"temperature": 1.0}, min_tokens=1, max_tokens=256)
    call = PreparedCall([prompt_ids], [prompt_text], [False], params, messages, stop=[])
    experiences = pack_experiences(tokenizer, call, engine.generate(call.prompt_ids, params))
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from trinity.rollout.sampling import Sample, SamplingParams
from trinity.types import Experience

if TYPE_CHECKING:
    from trinity.rollout.multimodal import MediaInputs

# rollout_args keys, each the SamplingParams field of the same name (n is chat's own argument)
ROLLOUT_KEYS = {
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "min_tokens",
    "stop_token_ids",
    "ignore_eos",
    "seed",
}
# "stop": strings that end a response (cut after sampling); logprobs are always returned
EXTRA_KEYS = {"stop", "logprobs"}


@dataclass
class PreparedCall:
    """Prompts ready for the engine plus what is needed to pack the results."""

    prompt_ids: list[list[int]]
    prompt_texts: list[str]
    truncated: list[bool]
    params: SamplingParams
    messages: list[dict[str, Any]] | None
    stop: list[str]
    # the images of a chat prompt (a vision-language model's), shared by its samples
    media: MediaInputs | None = None


def sampling_params(
    n: int, rollout_args: dict[str, Any], min_tokens: int, max_tokens: int | None
) -> SamplingParams:
    """``rollout_args`` over the wrapper's defaults ``min_tokens`` / ``max_tokens`` (None:
    up to ``max_model_len``); ``min_tokens`` never exceeds the resulting ``max_tokens``.

    Raises:
        TypeError: a key that is neither a sampling parameter nor ``stop`` / ``logprobs``.
    """
    unknown = set(rollout_args) - ROLLOUT_KEYS - EXTRA_KEYS
    if unknown:
        raise TypeError(
            f"unknown rollout_args {sorted(unknown)}; allowed: {sorted(ROLLOUT_KEYS | EXTRA_KEYS)}"
        )
    values: dict[str, Any] = {"n": n, "min_tokens": min_tokens}
    if max_tokens is not None:
        values["max_tokens"] = max_tokens
    for key, value in rollout_args.items():
        if key in ROLLOUT_KEYS and value is not None:
            values[key] = value
    if values.get("max_tokens") is not None:
        values["min_tokens"] = min(values["min_tokens"], values["max_tokens"])
    return SamplingParams(**values)


def stop_strings(stop: str | list[str] | None) -> list[str]:
    """The ``stop`` argument as a list of non-empty strings."""
    if stop is None:
        return []
    strings = [stop] if isinstance(stop, str) else list(stop)
    if not all(isinstance(s, str) and s for s in strings):
        raise ValueError(f"stop must be a non-empty string or a list of them, got {stop!r}")
    return strings


def cut_at_stop(tokenizer: Any, sample: Sample, stop: list[str]) -> Sample:
    """End ``sample`` at the token that completes the first stop string, if any."""
    decode = tokenizer.decode
    if not any(s in decode(sample.token_ids, skip_special_tokens=True) for s in stop):
        return sample
    for end in range(1, len(sample.token_ids) + 1):
        if any(s in decode(sample.token_ids[:end], skip_special_tokens=True) for s in stop):
            break
    return Sample(sample.token_ids[:end], sample.logprobs[:end], "stop", sample.model_version)


def before_stop(text: str, stop: list[str]) -> str:
    """``text`` up to (not including) the earliest stop string, as OpenAI returns it."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
    return text[:cut]


def pack_experiences(
    tokenizer: Any, call: PreparedCall, samples: list[list[Sample]]
) -> list[Experience]:
    """One Experience per sample, prompt by prompt: prompt + response tokens, the
    engine's logprobs and the temperature they were taken at (the call's; 1 for a greedy
    call, see :mod:`trinity.rollout.sampling`), texts (the response ends before a stop
    string), messages with the reply appended for a chat call."""
    temperature = call.params.temperature if call.params.temperature > 0 else 1.0
    if call.stop:
        samples = [[cut_at_stop(tokenizer, s, call.stop) for s in per] for per in samples]
    experiences = []
    for ids, text, truncated, per_prompt in zip(
        call.prompt_ids, call.prompt_texts, call.truncated, samples, strict=True
    ):
        for sample in per_prompt:
            response_text = tokenizer.decode(sample.token_ids, skip_special_tokens=True)
            response_text = before_stop(response_text, call.stop)
            messages = None
            if call.messages is not None:
                messages = copy.deepcopy(call.messages)
                messages.append({"role": "assistant", "content": response_text})
            experiences.append(
                Experience(
                    tokens=torch.tensor(ids + sample.token_ids, dtype=torch.long),
                    prompt_length=len(ids),
                    logprobs=torch.tensor(sample.logprobs, dtype=torch.float32),
                    # a truncated prompt's experience is kept for metrics, not trained on
                    action_mask=torch.full((len(sample.token_ids),), not truncated),
                    prompt_text=text,
                    response_text=response_text,
                    messages=messages,
                    temperature=float(temperature),
                    media=call.media,
                    info={
                        "model_version": sample.model_version,
                        "finish_reason": sample.finish_reason,
                        "prompt_truncated": truncated,
                    },
                )
            )
    return experiences
