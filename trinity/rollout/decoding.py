"""The decode loop of the rollout engine: one batch of prompts -> ``n`` samples each.

Prompts are left-padded (attention mask + explicit position ids), each distinct prompt
is prefilled once and its KV cache repeated for its ``n`` samples, and finished rows are
dropped from the batch and the cache so they cost nothing. Llama-family models decode
with :class:`~trinity.rollout.fast_decode.LlamaDecoder` (fused, packed weights and a
preallocated KV cache); other models step transformers' forward with a ``DynamicCache``
(:class:`TransformersBatch`). Logprobs follow the convention in
:mod:`trinity.rollout.sampling`. On CUDA the prompts, the cache and the sampler's tensors
live on the model's device (``DecodeModel.device``); each row's uniform draws still come
from its CPU generator, so a seed picks its draws whatever the device.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from transformers import DynamicCache

from trinity.rollout.fast_decode import DecodeBatch, LlamaDecoder
from trinity.rollout.sampling import FinishReason, Sample, SamplingParams, sample_tokens


@dataclass
class DecodeEntry:
    """One prompt of one request inside a decode batch."""

    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator
    request: int  # index of the request in the merged batch
    cancelled: Callable[[], bool] | None = None  # true once nobody waits for the samples


@dataclass
class DecodeModel:
    """What the decode loop reads of the engine's model (fixed between weight loads)."""

    model: Any  # transformers causal LM
    fast: LlamaDecoder | None  # the fused decoder, or None to step transformers' forward
    max_model_len: int
    pad_token_id: int
    eos_token_ids: set[int]
    device: torch.device = torch.device("cpu")  # the model's: where the batch's tensors go


def decode_entries(
    target: DecodeModel, entries: list[DecodeEntry], model_version: int
) -> list[list[Sample]]:
    """Decode one batch; returns ``n`` samples per entry, tagged with ``model_version``."""
    device = target.device
    input_ids, mask = (t.to(device) for t in left_padded(entries, target.pad_token_id))

    # one row per sample: the prefill of each prompt is shared by its n samples
    owner = [i for i, e in enumerate(entries) for _ in range(e.params.n)]
    index = torch.tensor(owner, device=device)
    budget = row_budgets(entries, owner, target.max_model_len)
    batch: DecodeBatch | TransformersBatch
    if target.fast is not None:
        batch, logits = target.fast.start(input_ids, mask, index, max(budget))
    else:
        cache, logits = prefill(target.model, input_ids, mask)
        batch = TransformersBatch(target.model, cache, mask, index, len(owner) > len(entries))
    if len(owner) > len(entries):
        logits = logits[index]
    kernels = None if target.fast is None else target.fast.sampler
    return sample_rows(
        batch, logits, entries, owner, budget, target.eos_token_ids, model_version, kernels
    )


class Rows(Protocol):
    """The rows still decoding, as :func:`sample_rows` steps them."""

    def keep(self, kept: torch.Tensor) -> None:
        """Keep only the rows at ``kept`` (indices into the current rows)."""

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B,) sampled ids -> (B, V) float32 next-token logits."""


def row_budgets(entries: list[DecodeEntry], owner: list[int], max_model_len: int) -> list[int]:
    """How many tokens each row may sample: its ``max_tokens``, within the model's length."""
    return [
        min(entries[i].params.max_tokens or max_model_len, max_model_len - len(entries[i].prompt))
        for i in owner
    ]


def sample_rows(
    batch: Rows,
    logits: torch.Tensor,
    entries: list[DecodeEntry],
    owner: list[int],
    budget: list[int],
    eos_token_ids: set[int],
    model_version: int,
    kernels: Any = None,
) -> list[list[Sample]]:
    """Sample every row (row r belongs to ``entries[owner[r]]``; ``logits`` are its first
    next-token logits) until a stop token, its ``budget`` or its request's cancellation,
    dropping finished rows from ``batch`` so they stop costing compute; returns ``n``
    samples per entry, tagged with ``model_version``."""
    device = logits.device
    params = [entries[i].params for i in owner]
    generators = [entries[i].generator for i in owner]
    stops = [stop_ids(p, eos_token_ids) for p in params]
    # a cancelled request's rows are dropped like finished ones (their samples are cut)
    cancelled = [entries[i].cancelled or _never for i in owner]
    temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)
    top_k = torch.tensor([p.top_k for p in params], dtype=torch.long, device=device)
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)

    tokens_out: list[list[int]] = [[] for _ in owner]
    logprobs_out: list[list[float]] = [[] for _ in owner]
    finish: list[FinishReason] = ["length"] * len(owner)
    alive = list(range(len(owner)))  # row ids still decoding, in batch order
    while True:
        banned = banned_tokens(alive, params, stops, tokens_out, logits.size(-1))
        if banned is not None:
            banned = banned.to(device)
        tokens, logprobs = sample_tokens(
            logits,
            temperature,
            top_k,
            top_p,
            generator_groups(alive, generators),
            banned,
            kernels=kernels,
        )
        keep = []
        for j, (row, token, logprob) in enumerate(
            zip(alive, tokens.tolist(), logprobs.tolist(), strict=True)
        ):
            tokens_out[row].append(token)
            logprobs_out[row].append(logprob)
            if token in stops[row]:
                finish[row] = "stop"
            elif len(tokens_out[row]) < budget[row] and not cancelled[row]():
                keep.append(j)
        if not keep:
            break
        if len(keep) < len(alive):
            # drop finished rows so they stop costing compute
            kept = torch.tensor(keep, device=device)
            batch.keep(kept)
            tokens = tokens[kept]
            temperature, top_k, top_p = temperature[kept], top_k[kept], top_p[kept]
            alive = [alive[j] for j in keep]
        logits = batch.step(tokens)

    grouped: list[list[Sample]] = [[] for _ in entries]
    for row, entry_index in enumerate(owner):
        sample = Sample(tokens_out[row], logprobs_out[row], finish[row], model_version)
        grouped[entry_index].append(sample)
    return grouped


def _never() -> bool:
    return False


def left_padded(entries: list[DecodeEntry], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts as (E, P) ids, left-padded, and their (E, P) int64 attention mask."""
    lengths = [len(e.prompt) for e in entries]
    width = max(lengths)
    input_ids = torch.full((len(entries), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(entries), width), dtype=torch.long)
    for i, entry in enumerate(entries):
        input_ids[i, width - lengths[i] :] = torch.tensor(entry.prompt)
        mask[i, width - lengths[i] :] = 1
    return input_ids, mask


def prefill(
    model: Any,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    positions: torch.Tensor | None = None,
    **inputs: Any,
) -> tuple[DynamicCache, torch.Tensor]:
    """Run the left-padded prompts once through transformers' forward, at ``positions``
    (default: each prompt's real tokens counted from 0) with the model's further
    ``inputs`` (an image model's pixel values).

    Returns:
        the KV cache and the next-token logits (E, V) float32.
    """
    if positions is None:
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    out = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
        **inputs,
        **{cache_keyword(model): cache},
    )
    return cache, out.logits[:, -1].float()


def banned_tokens(
    alive: list[int],
    params: list[SamplingParams],
    stops: list[set[int]],
    tokens_out: list[list[int]],
    vocab: int,
) -> torch.Tensor | None:
    """(B, V) mask of stop tokens for rows still short of their min_tokens."""
    banned = None
    for j, row in enumerate(alive):
        if len(tokens_out[row]) < params[row].min_tokens and stops[row]:
            if banned is None:
                banned = torch.zeros((len(alive), vocab), dtype=torch.bool)
            banned[j, list(stops[row])] = True
    return banned


def stop_ids(params: SamplingParams, eos_token_ids: set[int]) -> set[int]:
    """The token ids that end a sample of ``params``."""
    stops = set(params.stop_token_ids)
    if not params.ignore_eos:
        stops |= eos_token_ids
    return stops


def generator_groups(
    alive: list[int], generators: list[torch.Generator]
) -> list[tuple[torch.Tensor, torch.Generator]]:
    """Batch positions that share a generator, so each request samples from its own."""
    by_generator: dict[int, tuple[list[int], torch.Generator]] = {}
    for j, row in enumerate(alive):
        generator = generators[row]
        by_generator.setdefault(id(generator), ([], generator))[0].append(j)
    return [(torch.tensor(rows), generator) for rows, generator in by_generator.values()]


class TransformersBatch:
    """Decode rows stepped through transformers' forward with a ``DynamicCache``
    (the same interface as :class:`~trinity.rollout.fast_decode.DecodeBatch`)."""

    def __init__(
        self,
        model: Any,
        cache: DynamicCache,
        mask: torch.Tensor,
        rows: torch.Tensor,
        repeat: bool,
        offsets: torch.Tensor | None = None,
    ) -> None:
        """``rows``: each row's prompt (its cache is repeated for the rows when
        ``repeat``); ``offsets``: per prompt, what its positions add to its real tokens
        (Qwen-VL's rotary offset of the images; none for a text model)."""
        self.model, self.cache = model, cache
        self.cache_keyword = cache_keyword(model)
        if repeat:
            cache.batch_select_indices(rows)
        self.mask = mask[rows]  # (B, columns so far)
        self.positions = self.mask.sum(-1)  # (B,) position of each row's next token
        if offsets is not None:
            self.positions = self.positions + offsets[rows]

    def keep(self, kept: torch.Tensor) -> None:
        self.cache.batch_select_indices(kept)
        self.mask, self.positions = self.mask[kept], self.positions[kept]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B,) ids -> (B, V) float32 next-token logits."""
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(tokens), 1))], dim=1)
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=self.mask,
            position_ids=self.positions[:, None],
            use_cache=True,
            **{self.cache_keyword: self.cache},
        )
        self.positions = self.positions + 1
        return out.logits[:, -1].float()


def cache_keyword(model: Any) -> str:
    """The name ``model``'s forward takes its KV cache under: ``cache`` (transformers
    5.2x), else ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
