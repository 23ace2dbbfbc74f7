"""Continuous batching over a static KV cache: the rollout engine's decode path on CUDA.

The rows of a batch of requests (each prompt's ``n`` samples) queue for the slots of a
:class:`~trinity.rollout.slot_cache.SlotCache`. Between decode steps, waiting rows take
the slots that finished rows freed (their prompts prefilled together, their first token
sampled), so a long row holds one slot, not the whole batch. Each decode step is the
slot cache's step for the bucket of slots in use and columns reached, captured once per
bucket key (:class:`~trinity.rollout.step_graphs.StepGraphs`: CUDA graphs on a GPU) and
replayed; sampling and the stop checks stay on the device, and the host reads the slots'
state every ``SYNC_EVERY`` steps at most (fewer when every live row's budget ends
sooner). When no row waits, the engine hands over requests queued since the run began
(``more``), and each request is answered as soon as its rows are done (``on_entry``); with
nothing more to take, live rows in high slots move down so the step's bucket shrinks
with them.

Each row draws its uniform numbers from a generator of its own (:func:`row_generators`),
so a row's samples do not depend on which rows share its steps: the first row of a
request with a ``seed`` draws from ``torch.Generator().manual_seed(seed)``, as the
reference path (:mod:`trinity.rollout.decoding`) draws a one-row request's, and its other
rows from seeds drawn from that seed. Greedy rows and one-row seeded requests give the
reference path's tokens, and its logprobs up to float rounding (rows are batched
differently).

Which path the engine takes: :func:`decode_mode`, ``TRINITY_DECODE=static`` or
``reference`` in the environment to choose; ``TRINITY_DECODE_GRAPHS=0`` runs the static
path's steps on CUDA without capturing them.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from trinity.rollout.decoding import DecodeEntry, stop_ids
from trinity.rollout.device_sampler import filter_width
from trinity.rollout.fast_decode import LlamaDecoder
from trinity.rollout.sampling import Sample, SamplingParams
from trinity.rollout.slot_cache import SlotCache, bucket, cache_capacity, column_bucket
from trinity.rollout.step_graphs import Capture, StepGraphs

SYNC_EVERY = 8  # decode steps between two host reads of the slots' state, at most
DECODE_MODES = ("static", "reference")
_MIN_STOP_WIDTH = 8


def decode_mode(requested: str | None, device: torch.device, fast: LlamaDecoder | None) -> str:
    """ "static" (this module) or "reference" (:mod:`trinity.rollout.decoding`).

    ``requested`` (or else ``$TRINITY_DECODE``) names one; unset, CUDA takes the static
    path and the CPU the reference one. Models the fused decoder does not run (not
    Llama-family) always take the reference path."""
    chosen = requested or os.environ.get("TRINITY_DECODE") or None
    if chosen is not None and chosen not in DECODE_MODES:
        raise ValueError(f"TRINITY_DECODE must be one of {list(DECODE_MODES)}, got {chosen!r}")
    if fast is None:
        return "reference"
    if chosen is None:
        return "static" if device.type == "cuda" else "reference"
    return chosen


def row_generators(seed: int | None, rows: int, fallback: torch.Generator) -> list[torch.Generator]:
    """One generator per row of a request: seeded, the first from ``seed`` itself and the
    others from seeds drawn from it; unseeded, each from a seed drawn from ``fallback``
    (the engine's generator)."""
    if seed is None:
        draws = torch.randint(0, 2**62, (rows,), generator=fallback).tolist()
        return [torch.Generator().manual_seed(s) for s in draws]
    parent = torch.Generator().manual_seed(seed)
    draws = torch.randint(0, 2**62, (rows - 1,), generator=parent).tolist() if rows > 1 else []
    return [torch.Generator().manual_seed(s) for s in [seed, *draws]]


@dataclass
class _Row:
    entry: int  # index of its DecodeEntry
    params: SamplingParams
    generator: torch.Generator
    stops: set[int]
    budget: int  # most new tokens
    columns: int  # cache columns it fills: prompt + budget


class ContinuousDecoder:
    """The slot cache of one engine's fused decoder and its captured steps.

    Args:
        decoder: the engine's :class:`LlamaDecoder`.
        max_slots: the most rows decoded at once (the engine's ``max_batch_size``).
        capture: how steps are captured (:func:`~trinity.rollout.step_graphs.eager` on
            the CPU, :func:`~trinity.rollout.step_graphs.cuda_graph_capture` on CUDA).
        slot_limit: the most slots whose cache of ``capacity`` columns fits the memory
            budget (None: ``max_slots``).
        sync_every: steps between host reads, at most.
    """

    def __init__(
        self,
        decoder: LlamaDecoder,
        max_slots: int,
        capture: Capture,
        slot_limit: Callable[[int], int] | None = None,
        sync_every: int = SYNC_EVERY,
    ) -> None:
        self.decoder = decoder
        self.max_slots = max_slots
        self.slot_limit = slot_limit
        self.sync_every = sync_every
        self.cache: SlotCache | None = None
        self.graphs = StepGraphs(capture, self._save, self._restore)
        self.steps = 0  # decode steps run (replays)

    def _save(self) -> object:
        return self.cache.save()  # type: ignore[union-attr]

    def _restore(self, saved: object) -> None:
        self.cache.restore(saved)  # type: ignore[union-attr, arg-type]

    def release(self) -> None:
        """Drop the cache and the captured steps (a trainer takes the memory)."""
        self.cache = None
        self.graphs.clear()

    def _cache_for(self, rows: list[_Row], max_model_len: int) -> SlotCache:
        """A cache for ``rows``: the current one when it fits, else a bigger one (sizes
        only grow, so work that fit once never reallocates or recaptures)."""
        capacity = cache_capacity(max(r.columns for r in rows), max_model_len)
        slots = self.max_slots
        if self.slot_limit is not None:
            slots = max(1, min(slots, self.slot_limit(capacity)))
        stop_width = max(_MIN_STOP_WIDTH, bucket(max(len(r.stops) for r in rows), 2**31))
        current = self.cache
        if current is not None and current.fits(slots, capacity, stop_width, self.sync_every):
            return current
        if current is not None:
            slots = max(slots, current.slots)
            capacity = max(capacity, current.capacity)
            stop_width = max(stop_width, current.stop_width)
        self.release()  # the old cache's memory goes first
        self.cache = SlotCache(self.decoder, slots, capacity, stop_width, self.sync_every)
        return self.cache

    def decode(
        self,
        entries: list[DecodeEntry],
        generators: list[list[torch.Generator]],
        max_model_len: int,
        pad_token_id: int,
        eos_token_ids: set[int],
        model_version: int,
        more: Callable[[int], tuple[list[DecodeEntry], list[list[torch.Generator]]]] | None = None,
        on_entry: Callable[[int, list[Sample]], None] | None = None,
    ) -> list[list[Sample]]:
        """``n`` samples for each entry (``generators[i]``: one per row of entry i).

        ``more(free_slots)``, called whenever slots are free and no row waits, returns
        further entries (and their generators) to decode in this run, numbered after the
        ones before; ``on_entry(i, samples)`` is called as soon as entry i's rows are all
        done. Returns the samples of every entry, those ``more`` gave included."""
        run = _Run(self, max_model_len, pad_token_id, eos_token_ids, model_version, on_entry)
        run.add(entries, generators)
        cache = run.cache = self._cache_for(run.rows, max_model_len)
        run.free = list(range(cache.slots))
        while True:
            if not run.waiting and run.free and more is not None:
                run.add(*more(len(run.free)))
            if not run.waiting and not run.occupant:
                break
            admitted = run.admit()
            if not admitted and not run.occupant and run.waiting:
                # the next row needs a bigger cache, and no row is in this one
                cache = run.cache = self._cache_for(
                    [run.rows[r] for r in run.waiting], max_model_len
                )
                run.free = list(range(cache.slots))
                continue
            state, finished = run.harvest()
            if finished and (run.waiting or more is not None):
                continue  # the freed slots take newcomers before the next step
            if not run.occupant:
                continue
            if not run.waiting:
                self._compact(cache, run.occupant, run.free, state)
            occupied = [run.rows[row] for row in run.occupant.values()]
            width = filter_width([r.params for r in occupied], run.vocab)
            bans = any(r.params.min_tokens > 0 and r.stops for r in occupied)
            steps = min(
                self.sync_every,
                max(run.rows[row].budget - state[s][2] for s, row in run.occupant.items()),
            )
            self._draw(cache, run.rows, run.occupant, steps)
            top = max(run.occupant) + 1
            columns = max(state[s][3] for s in run.occupant) + steps + 1
            key = (bucket(top, cache.slots), column_bucket(columns, cache.capacity), width, bans)
            step = partial(cache.step, *key)
            for _ in range(steps):
                self.graphs.run(key, step)
                self.steps += 1
        return run.grouped()

    def _draw(
        self, cache: SlotCache, rows: list[_Row], occupant: dict[int, int], steps: int
    ) -> None:
        """Each sampling row's next ``steps`` uniform numbers into the cache's u_block."""
        block = torch.zeros(cache.u_block.shape, dtype=torch.float32)
        for slot, row in occupant.items():
            if rows[row].params.temperature > 0:
                block[slot, :steps] = torch.rand(steps, generator=rows[row].generator)
        cache.u_block.copy_(block)
        cache.step_index.zero_()

    def _compact(
        self,
        cache: SlotCache,
        occupant: dict[int, int],
        free: list[int],
        state: dict[int, tuple[bool, bool, int, int]],
    ) -> None:
        """Move rows of slots past the first ``len(occupant)`` into free slots below it,
        when that makes the step's bucket smaller."""
        count = len(occupant)
        if bucket(count, cache.slots) >= bucket(max(occupant) + 1, cache.slots):
            return
        sources = sorted(s for s in occupant if s >= count)
        targets = [s for s in free if s < count][: len(sources)]
        columns = max(state[s][3] for s in sources) + 1
        cache.move(sources, targets, columns)
        for source, target in zip(sources, targets, strict=True):
            occupant[target] = occupant.pop(source)
            state[target] = state.pop(source)
        free[:] = sorted(set(free) - set(targets) | set(sources))


class _Run:
    """The rows of one :meth:`ContinuousDecoder.decode` call: waiting, in slots, done."""

    def __init__(
        self,
        decoder: ContinuousDecoder,
        max_model_len: int,
        pad_token_id: int,
        eos_token_ids: set[int],
        model_version: int,
        on_entry: Callable[[int, list[Sample]], None] | None,
    ) -> None:
        self.max_model_len, self.pad_token_id = max_model_len, pad_token_id
        self.eos_token_ids, self.model_version = eos_token_ids, model_version
        self.on_entry = on_entry
        self.vocab = int(decoder.decoder.embed.size(0))
        self.cache: SlotCache
        self.entries: list[DecodeEntry] = []
        self.first_row: list[int] = []  # each entry's first row; its rows follow it
        self.owed: list[int] = []  # each entry's rows not done yet
        self.rows: list[_Row] = []
        self.results: list[Sample | None] = []
        self.waiting: deque[int] = deque()  # rows without a slot yet, in order
        self.free: list[int] = []  # free slots, ascending: newcomers take the lowest
        self.occupant: dict[int, int] = {}  # slot -> row

    def add(self, entries: list[DecodeEntry], generators: list[list[torch.Generator]]) -> None:
        for entry, entry_generators in zip(entries, generators, strict=True):
            index = len(self.entries)
            self.entries.append(entry)
            self.first_row.append(len(self.rows))
            self.owed.append(len(entry_generators))
            room = self.max_model_len - len(entry.prompt)
            budget = min(entry.params.max_tokens or self.max_model_len, room)
            stops = stop_ids(entry.params, self.eos_token_ids)
            for generator in entry_generators:
                self.waiting.append(len(self.rows))
                self.rows.append(
                    _Row(index, entry.params, generator, stops, budget, len(entry.prompt) + budget)
                )
                self.results.append(None)

    def finish(self, row: int, sample: Sample) -> None:
        self.results[row] = sample
        entry = self.rows[row].entry
        self.owed[entry] -= 1
        if self.owed[entry] == 0 and self.on_entry is not None:
            first = self.first_row[entry]
            count = len(self.rows) if entry + 1 == len(self.entries) else self.first_row[entry + 1]
            self.on_entry(entry, self.results[first:count])  # type: ignore[arg-type]

    def admit(self) -> bool:
        """Prefill waiting rows into free slots, in order, while they fit the cache;
        whether any came in. Cancelled rows end with no tokens."""
        cache = self.cache
        taken: list[tuple[int, int]] = []  # (slot, row)
        while self.waiting and len(taken) < len(self.free):
            row = self.rows[self.waiting[0]]
            if _cancelled(self.entries[row.entry]):
                self.finish(self.waiting.popleft(), Sample([], [], "length", self.model_version))
                continue
            if row.columns > cache.capacity or len(row.stops) > cache.stop_width:
                break
            taken.append((self.free[len(taken)], self.waiting.popleft()))
        if not taken:
            return False
        del self.free[: len(taken)]
        prompt_index: dict[int, int] = {}
        for _, row in taken:
            prompt_index.setdefault(self.rows[row].entry, len(prompt_index))
        rows = [self.rows[r] for _, r in taken]
        # the first token's draw, as the reference path draws it from the prefill
        u = torch.tensor(
            [
                float(torch.rand(1, generator=r.generator)) if r.params.temperature > 0 else 0.0
                for r in rows
            ]
        ).to(cache.device)
        cache.admit(
            [s for s, _ in taken],
            [self.entries[e].prompt for e in prompt_index],
            [prompt_index[r.entry] for r in rows],
            [r.params for r in rows],
            [r.stops for r in rows],
            [r.budget for r in rows],
            u,
            filter_width([r.params for r in rows], self.vocab),
            self.pad_token_id,
        )
        self.occupant.update(taken)
        return True

    def harvest(self) -> tuple[dict[int, tuple[bool, bool, int, int]], list[int]]:
        """Read the occupied slots (one host sync), end their finished or cancelled rows
        and free their slots: (slot -> (live, stopped, count, position), freed slots)."""
        cache = self.cache
        state = dict(zip(self.occupant, cache.read(list(self.occupant)), strict=True))
        finished = [
            s
            for s, (live, *_) in state.items()
            if not live or _cancelled(self.entries[self.rows[self.occupant[s]].entry])
        ]
        if finished:
            counts = [state[s][2] for s in finished]
            for slot, (tokens, logprobs) in zip(
                finished, cache.outputs(finished, counts), strict=True
            ):
                reason = "stop" if state[slot][1] else "length"
                row = self.occupant.pop(slot)
                self.finish(row, Sample(tokens, logprobs, reason, self.model_version))
                del state[slot]
            cache.free(finished)
            self.free = sorted(self.free + finished)
        return state, finished

    def grouped(self) -> list[list[Sample]]:
        grouped: list[list[Sample]] = [[] for _ in self.entries]
        for row, sample in zip(self.rows, self.results, strict=True):
            grouped[row.entry].append(sample)  # type: ignore[arg-type]
        return grouped


def _cancelled(entry: DecodeEntry) -> bool:
    return entry.cancelled is not None and entry.cancelled()
