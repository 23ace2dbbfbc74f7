"""Answering OpenAI API requests with a :class:`~trinity.rollout.wrapper.ModelWrapper`:
chat and text completions (plain JSON, or server-sent events with ``stream``), their
logprobs, and the model list.

Each reply is built from the wrapper's experiences, so with ``enable_history`` every
call is recorded for training. Besides the OpenAI fields, responses carry the token ids
(``prompt_token_ids``, ``choices[].token_ids``) and the weights' ``model_version``.
Tools go through :mod:`trinity.rollout.openai_tools`, streaming through
:mod:`trinity.rollout.openai_stream`. A request holds its rows in the server's
:class:`~trinity.rollout.openai_admission.Admission` while it is prepared and generated;
the CPU-heavy steps around the engine (rendering, tokenizing, logprobs, stream pieces)
run in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trinity.rollout.openai_requests import APIError, ChatCompletionRequest, CompletionRequest

if TYPE_CHECKING:
    from trinity.rollout.openai_admission import Admission
    from trinity.rollout.wrapper import ModelWrapper
    from trinity.types import Experience


def model_list(models: dict[str, ModelWrapper]) -> dict[str, Any]:
    """The ``GET /v1/models`` answer for the served wrappers."""
    data = [
        {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "trinity",
            "max_model_len": wrapper.engine.max_model_len,
        }
        for name, wrapper in models.items()
    ]
    return {"object": "list", "data": data}


async def chat_completion(
    body: ChatCompletionRequest,
    wrapper: ModelWrapper,
    on_reply: Callable[[str, list[Experience]], None] | None = None,
    admission: Admission | None = None,
) -> Any:
    """Answer a ``/v1/chat/completions`` request with ``wrapper``; ``on_reply`` gets the
    response id and the experiences behind it; ``admission`` bounds its work."""
    args = body.rollout_args()
    _check_token_ids(args["stop_token_ids"], wrapper, "stop_token_ids")
    args["max_tokens"] = body.max_completion_tokens or body.max_tokens
    messages = [m.as_dict() for m in body.messages]
    if any(isinstance(m.get("content"), list) for m in messages):
        from trinity.rollout.openai_admission import AdmissionLimits
        from trinity.rollout.openai_images import accept_images

        limits = admission.limits if admission is not None else AdmissionLimits.from_config()
        messages = accept_images(messages, limits)
    tools = body.tool_specs()
    with _admitted(admission, 1, body.n, args["max_tokens"], wrapper):
        template_tools = None
        if tools:
            from trinity.rollout.openai_tools import tool_prompt

            messages, template_tools = await asyncio.to_thread(
                tool_prompt, wrapper.tokenizer, messages, tools, wrapper.template_args
            )
        experiences = await _call(
            wrapper.achat(messages, body.n, response_limits=False, tools=template_tools, **args)
        )
    top = body.top_logprobs or 0
    choices, parts = [], []
    for i, exp in enumerate(experiences):
        logprobs = None
        if body.logprobs:
            logprobs = await asyncio.to_thread(
                _token_logprobs, wrapper, exp, top, args["temperature"]
            )
        message: dict[str, Any] = {"role": "assistant", "content": exp.response_text}
        finish_reason = exp.info["finish_reason"]
        calls = None
        if tools:
            from trinity.rollout.openai_tools import split_tool_calls

            allowed = {t["function"]["name"] for t in tools}
            content, found = split_tool_calls(exp.response_text, allowed)
            if found:
                message, calls = {**message, "content": content, "tool_calls": found}, found
                finish_reason = "tool_calls"
        choices.append(
            {
                "index": i,
                "message": message,
                "finish_reason": finish_reason,
                "logprobs": None if logprobs is None else {"content": logprobs},
                "token_ids": exp.response_tokens.tolist(),
            }
        )
        parts.append({"logprobs": logprobs, "tool_calls": calls, "exp": exp})
    envelope = _envelope("chat.completion", body.model, body.n, experiences, choices)
    if on_reply is not None:
        on_reply(envelope["id"], experiences)
    if not body.stream:
        return envelope
    from trinity.rollout.openai_stream import chat_chunks, sse_response

    pieces = await _stream_pieces(wrapper, [part.pop("exp") for part in parts])
    for part, texts in zip(parts, pieces, strict=True):
        part["pieces"] = texts
    return sse_response(chat_chunks(envelope, parts, body.include_usage))


async def text_completion(
    body: CompletionRequest,
    wrapper: ModelWrapper,
    on_reply: Callable[[str, list[Experience]], None] | None = None,
    admission: Admission | None = None,
) -> Any:
    """Answer a ``/v1/completions`` request with ``wrapper``; ``on_reply`` and
    ``admission`` as for :func:`chat_completion`."""
    if body.echo:
        raise APIError(400, "echo=true is not supported", param="echo")
    prompts = _prompt_list(body.prompt)
    args = body.rollout_args()
    with _admitted(admission, len(prompts), body.n, args["max_tokens"], wrapper):
        token_ids = [p for p in prompts if not isinstance(p, str)]
        await asyncio.to_thread(
            _check_token_ids, [t for p in token_ids for t in p], wrapper, "prompt"
        )
        _check_token_ids(args["stop_token_ids"], wrapper, "stop_token_ids")
        experiences = await _call(wrapper.agenerate(prompts, body.n, response_limits=False, **args))
    choices = []
    for i, exp in enumerate(experiences):
        logprobs = None
        if body.logprobs is not None:
            entries = await asyncio.to_thread(
                _token_logprobs, wrapper, exp, body.logprobs, args["temperature"]
            )
            offsets, offset = [], 0
            for entry in entries:
                offsets.append(offset)
                offset += len(entry["token"])
            logprobs = {
                "tokens": [e["token"] for e in entries],
                "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [
                    {t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries
                ],
                "text_offset": offsets,
            }
        choices.append(
            {
                "index": i,
                "text": exp.response_text,
                "finish_reason": exp.info["finish_reason"],
                "logprobs": logprobs,
                "token_ids": exp.response_tokens.tolist(),
                "prompt_token_ids": exp.tokens[: exp.prompt_length].tolist(),
            }
        )
    envelope = _envelope("text_completion", body.model, body.n, experiences, choices)
    if on_reply is not None:
        on_reply(envelope["id"], experiences)
    if not body.stream:
        return envelope
    from trinity.rollout.openai_stream import completion_chunks, sse_response

    pieces = await _stream_pieces(wrapper, experiences)
    return sse_response(completion_chunks(envelope, pieces, body.include_usage))


def _admitted(
    admission: Admission | None, prompts: int, n: int, max_tokens: int | None, wrapper: ModelWrapper
) -> contextlib.AbstractContextManager:
    if admission is None:
        return contextlib.nullcontext()
    return admission.admit(prompts, n, max_tokens, wrapper.engine.max_model_len)


async def _stream_pieces(wrapper: ModelWrapper, experiences: list[Experience]) -> list[list[str]]:
    """Each reply's text per sampled token (a tokenizer decode per token: in a thread)."""
    from trinity.rollout.openai_stream import token_pieces

    def pieces() -> list[list[str]]:
        return [
            token_pieces(wrapper.tokenizer, e.response_tokens.tolist(), e.response_text)
            for e in experiences
        ]

    return await asyncio.to_thread(pieces)


async def _call(coro: Any) -> list[Experience]:
    """Await a wrapper call; the engine's and sampler's input errors become 400s."""
    from trinity.rollout.engine import PromptTooLongError

    try:
        return await coro
    except PromptTooLongError as err:
        raise APIError(400, str(err), param="messages", code="context_length_exceeded") from None
    except ValueError as err:
        raise APIError(400, str(err)) from None


def _prompt_list(prompt: str | list[str] | list[int] | list[list[int]]) -> list[Any]:
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise APIError(400, "prompt must not be empty", param="prompt")
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    return list(prompt)


def _check_token_ids(ids: list[int], wrapper: ModelWrapper, param: str) -> None:
    """Token ids must lie in the model's vocabulary: the engine would index with them."""
    vocab = getattr(wrapper.engine, "vocab_size", None)  # a remote engine's server checks
    outside = [t for t in ids if vocab is not None and t >= vocab]
    if outside:
        raise APIError(
            400, f"token id {outside[0]} is outside the vocabulary [0, {vocab})", param=param
        )


def _token_logprobs(
    wrapper: ModelWrapper, exp: Experience, top: int, temperature: float
) -> list[dict[str, Any]]:
    """One OpenAI logprob entry per generated token, with ``top`` alternatives each."""
    decode = wrapper.tokenizer.decode
    response = exp.response_tokens.tolist()
    alternatives: list[list[tuple[int, float]]] = [[] for _ in response]
    if top > 0:
        alternatives = wrapper.top_logprobs(
            exp.tokens.tolist(), exp.prompt_length, top, temperature
        )
    entries = []
    for token, logprob, alts in zip(response, exp.logprobs.tolist(), alternatives, strict=True):
        text = decode([token])
        entries.append(
            {
                "token": text,
                "logprob": logprob,
                "bytes": list(text.encode("utf-8")),
                "top_logprobs": [
                    {
                        "token": decode([t]),
                        "logprob": lp,
                        "bytes": list(decode([t]).encode("utf-8")),
                    }
                    for t, lp in alts
                ],
            }
        )
    return entries


def _envelope(
    kind: str, model: str, n: int, experiences: list[Experience], choices: list[dict[str, Any]]
) -> dict[str, Any]:
    # n samples per prompt, prompts in order: count each prompt once
    prompt_tokens = sum(e.prompt_length for e in experiences[::n])
    completion_tokens = sum(e.response_length for e in experiences)
    return {
        "id": f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "prompt_token_ids": experiences[0].tokens[: experiences[0].prompt_length].tolist(),
        "model_version": experiences[0].model_version,
    }
