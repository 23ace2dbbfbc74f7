"""``stream=true`` on the OpenAI-compatible endpoint: server-sent events in OpenAI's chunks.

The engine samples a reply whole (requests share decode batches), so the stream starts
once the reply is done: time to first token is the whole generation. The chunks are what
OpenAI's streaming clients read: per choice, a first chunk with the role, one chunk per
sampled token (its text, and its logprobs when asked), the finish reason, then a usage
chunk when ``stream_options.include_usage`` is set, and ``data: [DONE]``. The deltas of a
choice concatenate to the reply a non-streamed call returns for the same request.

    return sse_response(chat_chunks(envelope, token_pieces, token_logprobs, include_usage))
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi.responses import StreamingResponse

# tokens kept before the token being decoded, so a piece decodes in its context
_CONTEXT_TOKENS = 6


def token_pieces(tokenizer: Any, token_ids: list[int], text: str) -> list[str]:
    """``text`` (the decoded reply, perhaps cut at a stop string) split at the sampled
    tokens: one piece per token (``""`` while a character is incomplete), joining to
    ``text`` exactly; what no token accounts for goes to the last piece."""
    pieces: list[str] = []
    sent = done = 0  # characters of text sent; tokens whose text was sent
    for k in range(1, len(token_ids) + 1):
        context = max(0, done - _CONTEXT_TOKENS)
        before = tokenizer.decode(token_ids[context:done], skip_special_tokens=True)
        after = tokenizer.decode(token_ids[context:k], skip_special_tokens=True)
        piece = ""
        # an incomplete character waits for the token completing it
        if after.startswith(before) and not after.endswith("\ufffd"):
            new = after[len(before) :]
            if text.startswith(new, sent):
                piece, sent, done = new, sent + len(new), k
        pieces.append(piece)
    if pieces:
        pieces[-1] += text[sent:]
    elif text:
        pieces.append(text)
    return pieces


def chat_chunks(
    envelope: dict[str, Any], per_choice: list[dict[str, Any]], include_usage: bool
) -> Iterator[dict[str, Any]]:
    """OpenAI ``chat.completion.chunk`` objects for a finished chat completion.

    Args:
        envelope: the non-streamed response (id, created, model, choices, usage).
        per_choice: per choice, ``pieces`` (text per token), ``logprobs`` (one OpenAI
            logprob entry per token, or None) and ``tool_calls`` (None when no call).
        include_usage: end with a chunk carrying the usage and no choices.
    """

    def chunk(choices: list[dict[str, Any]]) -> dict[str, Any]:
        head = {k: envelope[k] for k in ("id", "created", "model")}
        return {**head, "object": "chat.completion.chunk", "choices": choices}

    for choice, parts in zip(envelope["choices"], per_choice, strict=True):
        index = choice["index"]
        delta = {"role": "assistant", "content": ""}
        yield chunk([{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}])
        if parts["tool_calls"] is not None:  # calls are sent whole, with the content left
            content = choice["message"]["content"]
            if content:
                yield chunk([_delta(index, {"content": content})])
            calls = [{"index": i, **call} for i, call in enumerate(parts["tool_calls"])]
            yield chunk([_delta(index, {"tool_calls": calls})])
        else:
            logprobs = parts["logprobs"] or [None] * len(parts["pieces"])
            for piece, entry in zip(parts["pieces"], logprobs, strict=True):
                extra = {"content": [entry]} if entry is not None else None
                yield chunk([_delta(index, {"content": piece}, logprobs=extra)])
        yield chunk([_delta(index, {}, finish_reason=choice["finish_reason"])])
    if include_usage:
        yield {**chunk([]), "usage": envelope["usage"]}


def completion_chunks(
    envelope: dict[str, Any], pieces: list[list[str]], include_usage: bool
) -> Iterator[dict[str, Any]]:
    """OpenAI ``text_completion`` chunks: one per sampled token of each choice, then
    one with its finish reason (and a usage chunk when asked)."""
    head = {k: envelope[k] for k in ("id", "created", "model")}
    for choice, texts in zip(envelope["choices"], pieces, strict=True):
        for text in texts:
            yield {
                **head,
                "object": "text_completion",
                "choices": [
                    {
                        "index": choice["index"],
                        "text": text,
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
            }
        yield {
            **head,
            "object": "text_completion",
            "choices": [
                {
                    "index": choice["index"],
                    "text": "",
                    "logprobs": None,
                    "finish_reason": choice["finish_reason"],
                }
            ],
        }
    if include_usage:
        yield {**head, "object": "text_completion", "choices": [], "usage": envelope["usage"]}


def sse_response(chunks: Iterable[dict[str, Any]]) -> StreamingResponse:
    """The chunks as ``text/event-stream`` events, ending with ``data: [DONE]``."""

    def events() -> Iterator[str]:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def _delta(
    index: int,
    delta: dict[str, Any],
    *,
    logprobs: dict[str, Any] | None = None,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
