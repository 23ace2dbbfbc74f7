"""The decode loop of prompts with images: one batch of a vision-language model's
prompts -> ``n`` samples each, through transformers' forward.

The prefill runs the left-padded prompts once with the batch's pixel values (and grids)
and the model's position ids (:func:`trinity.rollout.multimodal.media_positions`: 3-D
rotary positions for Qwen-VL); each prompt's KV cache is then repeated for its ``n``
rows, and every later step feeds one text token per row at its position (real tokens so
far plus the row's rotary offset). Sampling, stop tokens, ``min_tokens``, cancellation
and the logprob convention are those of the text loop (:mod:`trinity.rollout.decoding`).
The fused CPU decoder is for text models only: a vision-language model always takes
this path, on the CPU or on the model's CUDA device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trinity.rollout.decoding import (
    DecodeEntry,
    TransformersBatch,
    left_padded,
    prefill,
    row_budgets,
    sample_rows,
)
from trinity.rollout.multimodal import (
    MediaInputs,
    batch_media,
    media_forward_inputs,
    media_positions,
)
from trinity.rollout.sampling import Sample


@dataclass
class MediaEntry(DecodeEntry):
    """A decode entry whose prompt comes with images (``media``; None: text only)."""

    media: MediaInputs | None = None


def decode_media_entries(
    model: Any,
    entries: list[MediaEntry],
    model_version: int,
    *,
    max_model_len: int,
    pad_token_id: int,
    eos_token_ids: set[int],
    device: torch.device,
) -> list[list[Sample]]:
    """Decode one batch of prompts with images; ``n`` samples per entry."""
    input_ids, mask = (t.to(device) for t in left_padded(entries, pad_token_id))
    media = {k: v.to(device) for k, v in batch_media([e.media for e in entries]).items()}
    positions, deltas = media_positions(model, input_ids, mask, media)
    cache, logits = prefill(model, input_ids, mask, positions, **media)
    owner = [i for i, e in enumerate(entries) for _ in range(e.params.n)]
    index = torch.tensor(owner, device=device)
    logits = logits[index]
    # the next text token's position: real tokens so far plus the rotary offset
    rows = TransformersBatch(model, cache, mask, index, repeat=True, offsets=deltas)
    budget = row_budgets(entries, owner, max_model_len)
    return sample_rows(rows, logits, entries, owner, budget, eos_token_ids, model_version)


def score_with_media(
    model: Any,
    token_ids: list[int],
    prompt_length: int,
    scale: float,
    media: MediaInputs | None,
    device: torch.device,
) -> list[float]:
    """Logprobs (``log_softmax(logits / scale)``) of one sequence's response tokens
    given its prompt and the prompt's images: the forward the trainer runs."""
    ids = torch.tensor([token_ids], device=device)
    mask = torch.ones_like(ids)
    inputs = media_forward_inputs(model, ids, mask, batch_media([media]))
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False, **inputs).logits
    logprobs = torch.log_softmax(logits[0, prompt_length - 1 : -1].float() / scale, dim=-1)
    return logprobs.gather(-1, ids[0, prompt_length:, None]).squeeze(-1).tolist()
