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

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from trinity.rollout.decoding import (
    DecodeEntry,
    banned_tokens,
    generator_groups,
    left_padded,
    stop_ids,
)
from trinity.rollout.multimodal import (
    MediaInputs,
    batch_media,
    media_forward_inputs,
    media_positions,
)
from trinity.rollout.sampling import FinishReason, Sample, sample_tokens


@dataclass
class MediaEntry(DecodeEntry):
    """A decode entry whose prompt comes with images (``media``; None: text only)."""

    media: MediaInputs | None = None


@dataclass
class _Rows:
    """The rows still decoding: their cache, mask, next position and sampling state."""

    cache: DynamicCache
    mask: torch.Tensor  # (B, columns so far)
    positions: torch.Tensor  # (B,) position id of each row's next token
    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor

    def keep(self, kept: torch.Tensor) -> None:
        self.cache.batch_select_indices(kept)
        self.mask, self.positions = self.mask[kept], self.positions[kept]
        self.temperature, self.top_k, self.top_p = (
            self.temperature[kept],
            self.top_k[kept],
            self.top_p[kept],
        )


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
    cache = DynamicCache(config=model.config)
    out = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
        **media,
        **{cache_keyword(model): cache},
    )
    owner = [i for i, e in enumerate(entries) for _ in range(e.params.n)]
    index = torch.tensor(owner, device=device)
    logits = out.logits[:, -1].float()[index]
    cache.batch_select_indices(index)
    params = [entries[i].params for i in owner]
    rows = _Rows(
        cache,
        mask[index],
        # the next text token's position: real tokens so far plus the rotary offset
        mask[index].sum(-1) + deltas[index],
        torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device),
        torch.tensor([p.top_k for p in params], dtype=torch.long, device=device),
        torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device),
    )
    stops = [stop_ids(p, eos_token_ids) for p in params]
    budget = [
        min(p.max_tokens or max_model_len, max_model_len - len(entries[i].prompt))
        for p, i in zip(params, owner, strict=True)
    ]
    generators = [entries[i].generator for i in owner]
    cancelled = [entries[i].cancelled for i in owner]
    tokens_out: list[list[int]] = [[] for _ in owner]
    logprobs_out: list[list[float]] = [[] for _ in owner]
    finish: list[FinishReason] = ["length"] * len(owner)
    alive = list(range(len(owner)))
    while True:
        banned = banned_tokens(alive, params, stops, tokens_out, logits.size(-1))
        tokens, logprobs = sample_tokens(
            logits,
            rows.temperature,
            rows.top_k,
            rows.top_p,
            generator_groups(alive, generators),
            None if banned is None else banned.to(device),
        )
        keep = []
        for j, (row, token, logprob) in enumerate(
            zip(alive, tokens.tolist(), logprobs.tolist(), strict=True)
        ):
            tokens_out[row].append(token)
            logprobs_out[row].append(logprob)
            gone = cancelled[row] is not None and cancelled[row]()
            if token in stops[row]:
                finish[row] = "stop"
            elif len(tokens_out[row]) < budget[row] and not gone:
                keep.append(j)
        if not keep:
            break
        if len(keep) < len(alive):
            kept = torch.tensor(keep, device=device)
            rows.keep(kept)
            tokens = tokens[kept]
            alive = [alive[j] for j in keep]
        logits = _step(model, rows, tokens)

    grouped: list[list[Sample]] = [[] for _ in entries]
    for row, entry_index in enumerate(owner):
        sample = Sample(tokens_out[row], logprobs_out[row], finish[row], model_version)
        grouped[entry_index].append(sample)
    return grouped


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


def cache_keyword(model: Any) -> str:
    """The name ``model``'s forward takes its KV cache under: ``cache`` (transformers
    5.2x), else ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _step(model: Any, rows: _Rows, tokens: torch.Tensor) -> torch.Tensor:
    """(B,) ids -> (B, V) float32 next-token logits; the rows' cache grows by one."""
    rows.mask = torch.cat([rows.mask, rows.mask.new_ones((len(tokens), 1))], dim=1)
    out = model(
        input_ids=tokens[:, None],
        attention_mask=rows.mask,
        position_ids=rows.positions[:, None],
        use_cache=True,
        **{cache_keyword(model): rows.cache},
    )
    rows.positions = rows.positions + 1
    return out.logits[:, -1].float()
