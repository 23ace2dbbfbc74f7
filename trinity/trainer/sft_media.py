"""SFT rows with images (``format.image_key`` / ``video_key`` of an SFT dataset or of
mix's expert data) for a vision-language policy: the row's images go before the text of
its first user message, the processor renders the prompt (each image expanded into its
image tokens) and keeps the images' model inputs on the experience, and the assistant
reply that ends the conversation is the trained part.

    experience = media_sft_row(processor, messages, images, [], limits, "geometry_sft", 3)
"""

from __future__ import annotations

from typing import Any

import torch

from trinity.rollout.media import media_parts
from trinity.rollout.media_messages import json_messages
from trinity.rollout.multimodal import render_media_chat
from trinity.types import EID, Experience


class MediaRowError(ValueError):
    """An SFT row with images that cannot be rendered as one prompt and one reply."""


def with_media(
    messages: list[dict[str, Any]], images: list[Any], videos: list[list[Any]]
) -> list[dict[str, Any]]:
    """``messages`` with ``images`` and ``videos`` before the text of the first user turn."""
    out = [dict(m) for m in messages]
    for i, message in enumerate(out):
        if message.get("role") == "user":
            text = message.get("content")
            parts = media_parts(images, videos)
            parts += text if isinstance(text, list) else [{"type": "text", "text": str(text)}]
            out[i] = {**message, "content": parts}
            return out
    raise MediaRowError("the row's images need a user message to go in; the row has none")


def media_sft_row(
    processor: Any,
    messages: list[dict[str, Any]],
    template_args: dict[str, Any],
    max_model_len: int | None,
    dataset: str,
    index: int,
) -> Experience:
    """One SFT experience of ``messages`` (with image parts; the last message is the
    assistant reply trained on). The prompt is never cut (that would split an image's
    tokens); the reply is cut at ``max_model_len``."""
    if not messages or messages[-1].get("role") != "assistant":
        raise MediaRowError("the last message must be the assistant reply to train on")
    prompt = render_media_chat(processor, messages[:-1], True, **template_args)
    plain = json_messages(messages)  # image parts as placeholders the template renders
    prompt_text = processor.apply_chat_template(
        plain[:-1], tokenize=False, add_generation_prompt=True, **template_args
    )
    full_text = processor.apply_chat_template(
        plain, tokenize=False, add_generation_prompt=False, **template_args
    )
    if not full_text.startswith(prompt_text):
        raise MediaRowError(
            "the chat template renders the prompt differently once the reply is added; "
            "use a template that only appends (format.chat_template)"
        )
    reply = processor.tokenizer(full_text[len(prompt_text) :], add_special_tokens=False)
    tokens = prompt.ids + list(reply["input_ids"])
    if max_model_len is not None:
        tokens = tokens[:max_model_len]
    if len(tokens) <= len(prompt.ids):
        raise MediaRowError(
            f"the prompt with its images takes {len(prompt.ids)} tokens: no reply token is "
            "left to train on within model.max_model_len"
        )
    return Experience(
        tokens=torch.tensor(tokens, dtype=torch.long),
        prompt_length=len(prompt.ids),
        action_mask=torch.ones(len(tokens) - len(prompt.ids), dtype=torch.bool),
        eid=EID(batch=dataset, task=index),
        info={"dataset": dataset},
        messages=plain,
        media=prompt.media,
    )
