"""Static KV cache over decode slots, and the decode step of one bucket as a pure function
of its tensors (what a CUDA graph captures).

A :class:`SlotCache` is allocated once for ``slots`` rows of up to ``capacity`` columns
each: keys and values (layers, slots, kv heads, capacity, head dim), and per slot the
last token and its position, tokens generated so far, the row's sampling parameters,
stop ids and budget, its output tokens and logprobs, and whether it is still live. A row
occupies one slot from its prefill (:meth:`SlotCache.admit`, its prompt's keys in
columns ``[0, P)``, its first token sampled) until the host frees it; column ``c`` of a
slot holds position ``c``, so a step's attention mask is "column <= position".

:meth:`SlotCache.step` decodes one token for slots ``[0, rows)`` over columns
``[0, columns)``: the decoder's layers (keys and values written at each row's
position), the logits, the sampler of :mod:`trinity.rollout.device_sampler` (uniform
number ``step_index`` of each row's ``u_block``) and the stop check (a stop id, or the
budget reached), all as in-place writes into the cache's tensors and nothing read back
on the host. Rows that are not live run too (a static shape) and change nothing. The
step for one (rows, columns, filter width, bans) key always touches the same memory, so
it can be captured once and replayed (:mod:`trinity.rollout.step_graphs`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from trinity.rollout.decode_batch import DecodeBatch
from trinity.rollout.device_sampler import sample_on_device
from trinity.rollout.fast_decode import LlamaDecoder
from trinity.rollout.sampling import SamplingParams

MIN_COLUMNS = 64  # smallest column bucket: short rows share one captured step
CAPACITY_STEP = 256  # a cache's columns are a multiple of this (not a power of two: memory)


def bucket(size: int, limit: int) -> int:
    """The smallest power of two >= ``size``, at most ``limit``."""
    found = 1
    while found < size:
        found *= 2
    return min(found, limit)


def cache_capacity(columns: int, max_model_len: int) -> int:
    """Columns of a cache for rows reaching ``columns``: the next multiple of
    ``CAPACITY_STEP``, at most ``max_model_len``."""
    return min(max_model_len, -(-columns // CAPACITY_STEP) * CAPACITY_STEP)


def column_bucket(columns: int, capacity: int) -> int:
    """Cache columns a step attends over when its rows reach ``columns``: a power of
    two, at least ``MIN_COLUMNS``, at most ``capacity``."""
    return min(capacity, max(MIN_COLUMNS, bucket(columns, capacity)))


class SlotCache:
    """Preallocated KV cache and per-slot decode state (see the module docstring).

    Args:
        decoder: the fused decoder whose layers fill the cache.
        slots: rows decoded at once, at most.
        capacity: columns per slot: a row's prompt plus its most new tokens.
        stop_width: stop ids a row may have (eos included), at most.
        sync_every: steps between two host reads: uniform numbers kept per slot.
    """

    def __init__(
        self,
        decoder: LlamaDecoder,
        slots: int,
        capacity: int,
        stop_width: int,
        sync_every: int,
    ) -> None:
        self.decoder = decoder
        self.slots, self.capacity, self.stop_width = slots, capacity, stop_width
        device = self.device = decoder.device
        shape = (len(decoder.layers), slots, decoder.kv_heads, capacity, decoder.head_dim)
        # zeros: columns past a row's position are masked, but 0 * NaN would still be NaN
        self.keys = torch.zeros(shape, dtype=decoder.dtype, device=device)
        self.values = torch.zeros(shape, dtype=decoder.dtype, device=device)

        def zeros(*size: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(size, dtype=dtype, device=device)

        self.tokens = zeros(slots)  # (S,) last token of each slot
        self.positions = zeros(slots)  # (S,) its position, the column its keys go to
        self.counts = zeros(slots)  # (S,) tokens generated
        self.budget = zeros(slots)  # (S,) most tokens the row may generate
        self.min_tokens = zeros(slots)
        self.temperature = zeros(slots, dtype=torch.float32)
        self.top_k = zeros(slots)
        self.top_p = torch.ones(slots, dtype=torch.float32, device=device)
        self.stops = torch.full((slots, stop_width), -1, dtype=torch.long, device=device)
        self.live = zeros(slots, dtype=torch.bool)
        self.stopped = zeros(slots, dtype=torch.bool)  # ended by a stop id (else: length)
        self.out_tokens = zeros(slots, capacity)  # (S, T) generated tokens
        self.out_logprobs = zeros(slots, capacity, dtype=torch.float32)
        self.u_block = zeros(slots, sync_every, dtype=torch.float32)  # (S, K) draws
        self.step_index = zeros(1)  # column of u_block the next step reads

    def fits(self, slots: int, capacity: int, stop_width: int, sync_every: int) -> bool:
        """Whether this cache serves rows needing that much."""
        return (
            self.slots >= slots
            and self.capacity >= capacity
            and self.stop_width >= stop_width
            and self.u_block.size(1) >= sync_every
        )

    def _vectors(self) -> list[torch.Tensor]:
        """The per-slot state (first dimension: slot), KV cache aside."""
        return [
            self.tokens,
            self.positions,
            self.counts,
            self.budget,
            self.min_tokens,
            self.temperature,
            self.top_k,
            self.top_p,
            self.stops,
            self.live,
            self.stopped,
            self.out_tokens,
            self.out_logprobs,
            self.u_block,
        ]

    def save(self) -> list[torch.Tensor]:
        """A copy of the per-slot state, for :meth:`restore` after warm-up steps (their
        KV writes land where the real step writes the same values)."""
        return [t.clone() for t in (*self._vectors(), self.step_index)]

    def restore(self, saved: list[torch.Tensor]) -> None:
        for tensor, copy in zip((*self._vectors(), self.step_index), saved, strict=True):
            tensor.copy_(copy)

    def admit(
        self,
        slots: Sequence[int],
        prompts: Sequence[Sequence[int]],
        prompt_of: Sequence[int],
        params: Sequence[SamplingParams],
        stops: Sequence[set[int]],
        budgets: Sequence[int],
        u: torch.Tensor,
        width: int | None,
        pad_token_id: int,
    ) -> None:
        """Prefill ``prompts`` (E distinct ones) into ``slots`` and sample each row's first
        token: row r goes to ``slots[r]`` from ``prompts[prompt_of[r]]`` with
        ``params[r]``, stop ids ``stops[r]``, ``budgets[r]`` new tokens at most and the
        uniform number ``u[r]``."""
        device = self.device
        index = torch.tensor(list(slots), device=device)
        rows = torch.tensor(list(prompt_of), device=device)
        lengths = [len(prompts[e]) for e in prompt_of]

        def put(tensor: torch.Tensor, values: list, dtype: torch.dtype) -> None:
            tensor[index] = torch.tensor(values, dtype=dtype).to(device)

        put(self.positions, [n - 1 for n in lengths], torch.long)
        put(self.counts, [0] * len(slots), torch.long)
        put(self.budget, list(budgets), torch.long)
        put(self.min_tokens, [p.min_tokens for p in params], torch.long)
        put(self.temperature, [p.temperature for p in params], torch.float32)
        put(self.top_k, [p.top_k for p in params], torch.long)
        put(self.top_p, [p.top_p for p in params], torch.float32)
        table = torch.full((len(slots), self.stop_width), -1, dtype=torch.long)
        for r, ids in enumerate(stops):
            table[r, : len(ids)] = torch.tensor(sorted(ids), dtype=torch.long)
        self.stops[index] = table.to(device)
        self.live[index] = True
        self.stopped[index] = False
        logits = self._prefill(index, rows, prompts, pad_token_id)
        banned = self._banned(index, logits.size(-1))
        tokens, logprobs = sample_on_device(
            logits, self.temperature[index], self.top_k[index], self.top_p[index], u, banned, width
        )
        self.record(index, tokens, logprobs)

    def _prefill(
        self,
        index: torch.Tensor,
        rows: torch.Tensor,
        prompts: Sequence[Sequence[int]],
        pad_token_id: int,
    ) -> torch.Tensor:
        """The prompts through the decoder's own prefill (left-padded, as the reference
        path runs it), their keys and values moved to columns [0, P) of each row's slot;
        returns each row's (R, V) next-token logits."""
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.bool)
        for e, prompt in enumerate(prompts):
            ids[e, width - len(prompt) :] = torch.tensor(list(prompt))
            mask[e, width - len(prompt) :] = True
        ids, mask = ids.to(self.device), mask.to(self.device)
        batch = DecodeBatch(self.decoder, mask, rows, new_tokens=1)
        logits = batch.prefill(ids, mask, rows)
        # column c of row r holds its prompt's token c: left padding shifted away
        pad = (width - mask.sum(-1)).index_select(0, rows)  # (R,)
        source = (torch.arange(width, device=self.device)[None] + pad[:, None]).clamp(max=width - 1)
        for layer in range(len(self.decoder.layers)):
            for cache, name in ((self.keys, "keys"), (self.values, "values")):
                if batch.shared:  # the prompts' columns once per prompt
                    prompt = getattr(batch, f"prompt_{name}")[layer].index_select(0, rows)
                else:
                    prompt = getattr(batch, name)[layer, :, :, :width]
                at = source[:, None, :, None].expand(-1, prompt.size(1), -1, prompt.size(3))
                cache[layer, index, :, :width] = prompt.gather(2, at)
        return logits.index_select(0, rows)

    def _banned(self, index: torch.Tensor, vocab: int) -> torch.Tensor:
        """(R, V) True at the stop ids of live rows short of their min_tokens."""
        short = self.live[index] & (self.counts[index] < self.min_tokens[index])
        stops = self.stops[index]
        hits = torch.zeros((index.numel(), vocab), dtype=torch.float32, device=self.device)
        hits.scatter_add_(1, stops.clamp(min=0), ((stops >= 0) & short[:, None]).float())
        return hits > 0

    def record(self, index: torch.Tensor, tokens: torch.Tensor, logprobs: torch.Tensor) -> None:
        """Append the sampled ``tokens`` of the live rows among slots ``index`` and check
        their stop ids and budgets; rows that are not live keep their state."""
        live = self.live[index]
        counts = self.counts[index]
        at = counts.clamp(max=self.capacity - 1)
        self.out_tokens[index, at] = torch.where(live, tokens, self.out_tokens[index, at])
        self.out_logprobs[index, at] = torch.where(live, logprobs, self.out_logprobs[index, at])
        self.tokens[index] = torch.where(live, tokens, self.tokens[index])
        counts = counts + live.long()
        self.counts[index] = counts
        self.positions[index] = self.positions[index] + live.long()
        hit = live & (self.stops[index] == tokens[:, None]).any(dim=-1)
        self.stopped[index] = self.stopped[index] | hit
        self.live[index] = live & ~hit & (counts < self.budget[index])

    def step(self, rows: int, columns: int, width: int | None, bans: bool) -> None:
        """One token for the live rows among slots [0, rows), attending over columns
        [0, columns); a pure function of the cache's tensors (see the module docstring).
        ``width``: the sampler's filter width; ``bans``: mask stop ids of rows short of
        their min_tokens."""
        d = self.decoder
        index = torch.arange(rows, device=self.device)
        positions = self.positions[:rows]
        keys, values = self.keys[:, :rows, :, :columns], self.values[:, :rows, :, :columns]
        future = torch.arange(columns, device=self.device)[None, :] > positions[:, None]
        mask = torch.zeros((rows, columns), dtype=d.dtype, device=self.device)
        mask = mask.masked_fill_(future, float("-inf"))[:, None, None]

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys[layer][index, :, positions] = k
            values[layer][index, :, positions] = v
            out = F.scaled_dot_product_attention(
                q[:, :, None], keys[layer], values[layer], attn_mask=mask, enable_gqa=True
            )
            return out.reshape(rows, -1)

        logits = d.logits(d.forward(self.tokens[:rows], positions, attend))
        u = self.u_block[:rows].index_select(1, self.step_index).squeeze(1)
        self.step_index += 1
        banned = self._banned(index, logits.size(-1)) if bans else None
        tokens, logprobs = sample_on_device(
            logits, self.temperature[:rows], self.top_k[:rows], self.top_p[:rows], u, banned, width
        )
        self.record(index, tokens, logprobs)

    def move(self, sources: Sequence[int], targets: Sequence[int], columns: int) -> None:
        """Move the rows of slots ``sources`` into the free slots ``targets`` (their
        first ``columns`` cache columns), so live rows fill a smaller bucket."""
        src = torch.tensor(list(sources), device=self.device)
        dst = torch.tensor(list(targets), device=self.device)
        for tensor in self._vectors():
            tensor[dst] = tensor[src]
        for cache in (self.keys, self.values):
            cache[:, dst, :, :columns] = cache[:, src, :, :columns]
        self.free(sources)

    def free(self, slots: Sequence[int]) -> None:
        """Reset ``slots`` for the next row: not live, position 0 (a free slot inside a
        step's bucket writes its column 0, which every bucket has)."""
        index = torch.tensor(list(slots), device=self.device)
        self.live[index] = False
        self.positions[index] = 0

    def read(self, slots: Sequence[int]) -> list[tuple[bool, bool, int, int]]:
        """(live, stopped, tokens generated, position) of ``slots``: one host sync."""
        if not slots:
            return []
        index = torch.tensor(list(slots), device=self.device)
        state = torch.stack(
            [
                self.live[index].long(),
                self.stopped[index].long(),
                self.counts[index],
                self.positions[index],
            ]
        )
        return [(bool(a), bool(b), int(c), int(p)) for a, b, c, p in state.T.tolist()]

    def outputs(
        self, slots: Sequence[int], counts: Sequence[int]
    ) -> list[tuple[list[int], list[float]]]:
        """The generated tokens and logprobs of ``slots`` (``counts`` of each)."""
        index = torch.tensor(list(slots), device=self.device)
        longest = max(counts)
        tokens = self.out_tokens[index, :longest].tolist()
        logprobs = self.out_logprobs[index, :longest].tolist()
        return [(t[:n], lp[:n]) for t, lp, n in zip(tokens, logprobs, counts, strict=True)]
