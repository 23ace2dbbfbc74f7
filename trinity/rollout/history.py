"""Join recorded chat calls that continue each other into multi-turn experiences.

An agent that talks to the model turn by turn sends, at every turn, the whole
conversation so far: the earlier messages, the model's earlier replies, and the new
user (or tool) message. Recorded one experience per call, each turn re-reads the whole
context as prompt. Joined, the conversation becomes one sequence

    prompt_1 | reply_1 | glue_1 | reply_2 | glue_2 | reply_3

where ``reply_k`` are the tokens the model sampled (action_mask True, the engine's
logprobs) and ``glue_k`` are the chat-template tokens between them: the end of the
assistant turn, the next user message, the next assistant header (action_mask False,
logprob 0). The replies keep their sampled token ids; the glue is tokenized from the
chat template's text, rendered with the variables the engine gave the template (e.g.
``enable_thinking``), so the joined sequence can differ from the re-tokenized prompt
the model read at a later turn only where a reply decodes to text that tokenizes
differently (rare; the reply's own tokens are always the ones trained on).

A call continues an earlier one when its messages start with that call's messages and
reply, and the template's rendering of the conversation starts with the text of the
tokens recorded so far. Calls that continue nothing (or whose text does not line up,
e.g. a reply cut at a stop string, or that sampled at another temperature than the
turns before) stay as they were.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from trinity.types import Experience


def merge_conversations(
    experiences: list[Experience],
    tokenizer: Any,
    template_args: dict[str, Any] | None = None,
) -> list[Experience]:
    """Join the chat experiences that continue each other; order of first turns is kept.

    Args:
        experiences: recorded calls in call order (chat calls carry ``messages``).
        tokenizer: the model's tokenizer, with the chat template the calls used.
        template_args: the variables the engine passed that template (e.g.
            ``enable_thinking``; ``ModelWrapper.template_args``), so the glue is the
            text the model read.

    Returns:
        One experience per conversation branch; ``info["turns"]`` counts its calls.
    """
    args = dict(template_args or {})
    merged: list[Experience] = []
    for exp in experiences:
        target = _continued(merged, exp)
        joined = _join(merged[target], exp, tokenizer, args) if target is not None else None
        if joined is None:
            merged.append(exp)
        else:
            merged[target] = joined
    return merged


def _continued(merged: list[Experience], exp: Experience) -> int | None:
    """Index of the longest conversation in ``merged`` that ``exp``'s request extends."""
    if exp.messages is None:
        return None
    request = _turns(exp.messages[:-1])
    best, best_len = None, 0
    for i, conv in enumerate(merged):
        if conv.messages is None:
            continue
        so_far = _turns(conv.messages)
        if len(so_far) >= len(request) or len(so_far) <= best_len:
            continue
        if request[: len(so_far)] == so_far:
            best, best_len = i, len(so_far)
    return best


def _turns(messages: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """(role, content) of each message: clients echo replies back with extra empty fields."""
    return [(m.get("role"), m.get("content")) for m in messages]


def _join(
    conv: Experience, exp: Experience, tokenizer: Any, template_args: dict[str, Any]
) -> Experience | None:
    """``conv`` followed by the glue tokens and ``exp``'s reply; None if they do not line up
    or were sampled at different temperatures (one experience has one)."""
    assert conv.messages is not None and exp.messages is not None
    if conv.temperature != exp.temperature:
        return None
    seen = tokenizer.decode(conv.tokens.tolist(), skip_special_tokens=False)
    rendered = tokenizer.apply_chat_template(
        conv.messages, tokenize=False, add_generation_prompt=False, **template_args
    )
    following = tokenizer.apply_chat_template(
        exp.messages[:-1], tokenize=False, add_generation_prompt=True, **template_args
    )
    if not rendered.startswith(seen) or not following.startswith(rendered):
        return None
    glue_text = rendered[len(seen) :] + following[len(rendered) :]
    glue = tokenizer(glue_text, add_special_tokens=False)["input_ids"]
    # the later turn's prompt must be the earlier context plus the glue, as text
    if tokenizer.decode(conv.tokens.tolist() + glue, skip_special_tokens=False) != following:
        return None
    response = exp.response_tokens
    info = copy.deepcopy(exp.info)
    info["turns"] = int(conv.info.get("turns", 1)) + 1
    return Experience(
        tokens=torch.cat([conv.tokens, torch.tensor(glue, dtype=torch.long), response]),
        prompt_length=conv.prompt_length,
        logprobs=torch.cat([_logprobs(conv), torch.zeros(len(glue)), _logprobs(exp)]),
        action_mask=torch.cat(
            [conv.action_mask, torch.zeros(len(glue), dtype=torch.bool), exp.action_mask]
        ),
        eid=conv.eid,
        info=info,
        temperature=exp.temperature,
        prompt_text=conv.prompt_text,
        response_text=tokenizer.decode(
            torch.cat([conv.response_tokens, torch.tensor(glue, dtype=torch.long), response]),
            skip_special_tokens=True,
        ),
        messages=copy.deepcopy(exp.messages),
    )


def _logprobs(exp: Experience) -> torch.Tensor:
    if exp.logprobs is None:
        return torch.zeros(exp.response_length)
    return exp.logprobs.float()
