"""CPU rollout engine on transformers: loading the model, batching requests, swapping
weights.

One background worker thread owns the model. ``generate`` calls from any number of
threads (or ``agenerate`` from event loops) are merged by a
:class:`~trinity.rollout.batcher.RequestBatcher`: requests that arrive within
``batch_window_s`` of each other (up to ``max_batch_size`` sequences) form one decode
batch, so concurrent workflow runners share forward passes. Weight updates
(``load_state_dict``) take the same lock as a batch, so they land between batches,
never in the middle of a decode.

The decode loop is in :mod:`trinity.rollout.decoding`, scoring (``compute_logprobs``) in
:mod:`trinity.rollout.scoring`, chat rendering in :mod:`trinity.rollout.chat`.

``device="cuda"`` puts the weights on the GPU: decoding takes the torch path there (the
fused decoder's preallocated KV cache and SDPA, no CPU kernels or packed linears), batched
as on the CPU. The KV cache is then bounded by ``gpu_memory_utilization``: of the
device's total memory (``torch.cuda.mem_get_info``) that fraction, less what this process
holds once the weights are loaded, is the budget of one decode batch's KV cache, and a
batch whose rows would need more (rows x (prompt + max new tokens) x bytes per token) is
split into several decode batches (a single prompt's ``n`` rows are never split). With an
explorer and a trainer on one GPU the fraction is the engine's share of it.

On CUDA a Llama-family model decodes by continuous batching over a static KV cache
(:mod:`trinity.rollout.continuous_batching`: slots freed by finished rows are refilled
between steps, each step a CUDA graph captured once per bucket); the CPU keeps the
decode loop above. ``decode`` (or ``TRINITY_DECODE``) picks either path on either device.

    engine = TransformersEngine("SmolLM2-135M-Instruct")
    prompt = engine.apply_chat_template([{"role": "user", "content": "2+3?"}])
    [[sample]] = engine.generate([prompt], SamplingParams(max_tokens=32))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from trinity.rollout.batcher import DELIVERED, RequestBatcher
from trinity.rollout.chat import chat_template_args, load_tokenizer, render_chat
from trinity.rollout.continuous_batching import ContinuousDecoder, decode_mode, row_generators
from trinity.rollout.cpu_linear import pack_linears, packing_supported, repack
from trinity.rollout.decoding import DecodeEntry, DecodeModel, decode_entries
from trinity.rollout.fast_decode import LlamaDecoder
from trinity.rollout.model_path import resolve_model_path
from trinity.rollout.overrides import model_config
from trinity.rollout.sampling import Sample, SamplingParams
from trinity.rollout.scoring import score_responses, top_logprobs
from trinity.rollout.step_graphs import cuda_graph_capture, eager, graphs_enabled

# importable from here as before
__all__ = [
    "PromptTooLongError",
    "TransformersEngine",
    "chat_template_args",
    "load_tokenizer",
    "render_chat",
]

# the static decode path merges requests of up to this many times max_batch_size rows
# into one run (max_batch_size of them decode at once, the others wait for a slot)
QUEUED_SLOTS = 4

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def kv_bytes_per_token(config: Any, dtype: torch.dtype) -> int:
    """Bytes of keys and values one token of one row holds in the cache, all layers."""
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = getattr(config, "head_dim", None) or int(config.hidden_size) // heads
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * int(config.num_hidden_layers) * kv_heads * int(head_dim) * itemsize


def kv_cache_budget(fraction: float, total_bytes: int, used_bytes: int) -> int:
    """Bytes a decode batch's KV cache may take: ``fraction`` of the device's
    ``total_bytes`` less the ``used_bytes`` this process already holds (the weights);
    at least 0."""
    return max(0, int(fraction * total_bytes) - int(used_bytes))


class PromptTooLongError(ValueError):
    """A prompt leaves no room for a response within ``max_model_len``."""


@dataclass
class _Request:
    prompts: list[list[int]]
    params: SamplingParams
    future: Future | None = None  # set once queued; cancelled when its caller leaves

    def cancelled(self) -> bool:
        return self.future is not None and self.future.cancelled()


class TransformersEngine:
    """Rollout engine: a causal LM from transformers, sampled on the CPU.

    Args:
        model_path: anything :func:`trinity.rollout.model_path.resolve_model_path` accepts.
        dtype: weight and compute dtype, "bfloat16" (default; fast on CPUs with
            AVX512-BF16/AMX), "float32" or "float16".
        max_model_len: longest prompt + response; defaults to the model's
            ``max_position_embeddings``.
        seed: seeds the generator used by requests without their own seed.
        num_threads: torch intra-op threads (process-wide); None leaves torch's default
            (one per core). When other busy processes share the cores (a trainer on the
            same machine), 1 is much faster: OpenMP threads that wait for a descheduled
            peer can slow a decode step down by 10x or more (``OMP_WAIT_POLICY=PASSIVE``
            in the environment, set before torch is imported, also avoids it).
        max_batch_size: most sequences merged into one decode batch; on the static decode
            path the most decoded at once, with up to ``QUEUED_SLOTS`` times as many merged
            into one run.
        batch_window_s: how long the worker waits for more requests before decoding.
        pack_weights: keep oneDNN-packed copies of bf16 linear weights for faster
            decoding (see :mod:`trinity.rollout.cpu_linear`); ignored where unsupported.
        fast_decode: decode Llama-family models with the fused decoder of
            :mod:`trinity.rollout.fast_decode` (same tokens and logprobs as transformers'
            forward, up to float rounding); False always steps transformers' forward.
        override_config: entries replacing those of the model's ``config.json``
            (``model.override_config``; see :mod:`trinity.rollout.overrides`).
        device: where the weights live and decoding runs: "cpu" (default) or a CUDA
            device ("cuda", "cuda:0"; see the module docstring).
        gpu_memory_utilization: on CUDA, the fraction of the device's memory the engine
            may fill (weights and KV cache); ignored on the CPU.
        decode: "static" (continuous batching over a static KV cache) or "reference"
            (the decode loop of :mod:`trinity.rollout.decoding`); None: ``$TRINITY_DECODE``
            where set, else static on CUDA and reference on the CPU (see
            :func:`trinity.rollout.continuous_batching.decode_mode`).
    """

    def __init__(
        self,
        model_path: str,
        dtype: str = "bfloat16",
        max_model_len: int | None = None,
        seed: int = 0,
        num_threads: int | None = None,
        max_batch_size: int = 64,
        batch_window_s: float = 0.01,
        pack_weights: bool = True,
        chat_template: str | None = None,
        enable_thinking: bool | None = None,
        fast_decode: bool = True,
        override_config: Mapping[str, Any] | None = None,
        device: str | torch.device = "cpu",
        gpu_memory_utilization: float = 0.9,
        decode: str | None = None,
    ) -> None:
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        self.num_threads = num_threads
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        path = resolve_model_path(model_path)
        self.model_path = str(path)
        self.tokenizer = load_tokenizer(path, chat_template)
        self.template_args = chat_template_args(enable_thinking)
        self.dtype = dtype
        self.device = torch.device(device)
        self.gpu_memory_utilization = gpu_memory_utilization
        self._decode_requested = decode
        # bytes one decode batch's KV cache may take (CUDA only; None: unbounded)
        self.kv_budget: int | None = None
        self.max_batch_size = max_batch_size
        # mode colocate: the KV memory is given up while a trainer on the GPU steps
        self.memory_released = False
        self.memory_events: list[tuple[str, int]] = []  # ("release" | "retake", version)
        self.model_version = 0
        self.num_batches = 0  # decode batches run so far
        self._generator = torch.Generator().manual_seed(seed)
        # every torch op of the engine (loading, decoding, scoring, weight swaps) runs on
        # this one worker thread, one at a time, so the process keeps a single OpenMP
        # thread team (see trinity.rollout.batcher) and needs no lock around the weights
        self._batcher: RequestBatcher[_Request, Any] = RequestBatcher(
            self._run_requests,
            size_of=lambda r: r.params.n * len(r.prompts),
            max_size=max_batch_size,
            window_s=batch_window_s,
            on_start=self._set_threads,
            name="rollout-engine",
        )
        try:
            self._batcher.call(
                lambda: self._load(
                    path, dtype, max_model_len, pack_weights, fast_decode, override_config
                )
            )
        except BaseException:
            self._batcher.close()
            raise

    def _load(
        self,
        path: Any,
        dtype: str,
        max_model_len: int | None,
        pack_weights: bool,
        fast_decode: bool,
        override_config: Mapping[str, Any] | None,
    ) -> None:
        self.model = self._pretrained(AutoModelForCausalLM, path, dtype, override_config)
        on_cpu = self.device.type == "cpu"
        self.max_model_len = max_model_len or int(self.model.config.max_position_embeddings)
        # the fused decoder packs its own (fused) weights: one packed copy either way; on
        # CUDA it neither packs nor calls the CPU kernels (fast_decode.cpu_paths)
        self._fast = (
            LlamaDecoder.for_model(self.model, self.max_model_len, pack=pack_weights)
            if fast_decode
            else None
        )
        pack = on_cpu and pack_weights and packing_supported() and self._fast is None
        self._packed = pack_linears(self.model) if pack else []
        self.decode_path = "transformers" if self._fast is None else "fused-llama"
        self._measure_kv(self.model.config, _DTYPES[dtype])
        self.decode_mode = decode_mode(self._decode_requested, self.device, self._fast)
        self._continuous: ContinuousDecoder | None = None
        if self.decode_mode == "static":
            self._continuous = ContinuousDecoder(
                self._fast,  # type: ignore[arg-type]  # decode_mode: static needs it
                self.max_batch_size,
                cuda_graph_capture() if self.device.type == "cuda" and graphs_enabled() else eager,
                self._slots_within_budget if self.device.type == "cuda" else None,
            )
            # rows beyond the slots wait in the run's queue for a freed slot instead of
            # the next batch, so requests of uneven lengths share one run
            self._batcher.max_size = QUEUED_SLOTS * self.max_batch_size
        self.eos_token_ids = self._eos_token_ids()
        self.pad_token_id = self._pad_token_id()

    def _pretrained(
        self, auto_class: Any, path: Any, dtype: str, override_config: Mapping[str, Any] | None
    ) -> torch.nn.Module:
        """``auto_class``'s model of ``path`` in eval mode on the engine's device."""
        # the trainer builds the policy from the same overridden config
        config = model_config(path, override_config)
        model = auto_class.from_pretrained(
            path,
            dtype=_DTYPES[dtype],
            attn_implementation="sdpa",
            **({"config": config} if config is not None else {}),
        ).eval()
        if self.device.type != "cpu":
            model.to(self.device)
        return model

    def _measure_kv(self, model_config: Any, dtype: torch.dtype) -> None:
        """On CUDA: the KV cache's budget (``gpu_memory_utilization`` of the device less
        what is allocated) and the bytes one cached token takes; no budget elsewhere."""
        self._kv_token_bytes = 0
        if self.device.type == "cuda":
            _, total = torch.cuda.mem_get_info(self.device)
            used = torch.cuda.memory_allocated(self.device)
            self.kv_budget = kv_cache_budget(self.gpu_memory_utilization, total, used)
            self._kv_token_bytes = kv_bytes_per_token(model_config, dtype)

    # ---- public API -----------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_input_embeddings().num_embeddings)

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of ``messages`` rendered with the tokenizer's chat template."""
        return render_chat(self.tokenizer, messages, add_generation_prompt, **self.template_args)

    def submit(self, prompts: list[list[int]], params: SamplingParams) -> Future:
        """Queue a request; the future resolves to ``n`` samples per prompt. Cancelling
        the future drops the request from the queue, or its rows from their decode batch
        at the next step."""
        self._check_prompts(prompts)
        # the future is the request's before it is queued: a running batch may take the
        # request in and resolve it (continuous batching)
        request = _Request([list(p) for p in prompts], params, Future())
        return self._batcher.submit(request, request.future)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        """Sample ``params.n`` responses for each prompt (blocking, thread-safe).

        Returns:
            One list of ``params.n`` samples per prompt, in prompt order.
        """
        return self.submit(prompts, params).result()

    async def agenerate(
        self, prompts: list[list[int]], params: SamplingParams
    ) -> list[list[Sample]]:
        """Async :meth:`generate`: awaits the worker without blocking the event loop."""
        return await asyncio.wrap_future(self.submit(prompts, params))

    def compute_logprobs(
        self, token_ids: list[list[int]], prompt_lengths: list[int], temperature: float = 1.0
    ) -> list[list[float]]:
        """Logprobs of each sequence's response tokens under the current weights.

        Args:
            token_ids: B sequences of prompt + response token ids (lengths L_i).
            prompt_lengths: B prompt lengths P_i >= 1.
            temperature: logits are divided by it (0 counts as 1, as in greedy sampling).

        Returns:
            B lists of L_i - P_i floats: log_softmax(logits / T) at each response token.
        """
        if len(token_ids) != len(prompt_lengths):
            raise ValueError("token_ids and prompt_lengths must have the same length")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        for seq, plen in zip(token_ids, prompt_lengths, strict=True):
            if not 1 <= plen <= len(seq):
                raise ValueError(f"prompt length {plen} is outside [1, {len(seq)}]")
        scale = temperature if temperature > 0 else 1.0
        return self._batcher.call(
            lambda: score_responses(self.model, token_ids, prompt_lengths, scale, self.pad_token_id)
        )

    def compute_top_logprobs(
        self, token_ids: list[int], prompt_length: int, k: int, temperature: float = 1.0
    ) -> list[list[tuple[int, float]]]:
        """The ``k`` most likely tokens (id, logprob) at each response position.

        One forward pass over prompt + response (L tokens, prompt P >= 1); returns
        L - P lists, logprobs as in :meth:`compute_logprobs` (OpenAI's top_logprobs).
        """
        if not 1 <= prompt_length <= len(token_ids):
            raise ValueError(f"prompt length {prompt_length} is outside [1, {len(token_ids)}]")
        scale = temperature if temperature > 0 else 1.0
        return self._batcher.call(
            lambda: top_logprobs(self.model, token_ids, prompt_length, k, scale)
        )

    def load_state_dict(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Swap in new weights between decode batches and set ``model_version``.

        Keys missing from ``state_dict`` are allowed only for parameters tied to a key
        that is present (e.g. ``lm_head.weight`` tied to the input embeddings).
        """
        expected = set(self.model.state_dict())
        missing = expected - state_dict.keys() - self._tied_aliases(state_dict)
        unexpected = state_dict.keys() - expected
        if missing or unexpected:
            # checked before loading, so a bad state dict leaves the weights untouched
            raise KeyError(
                f"state_dict does not match the model: missing {sorted(missing)}, "
                f"unexpected {sorted(unexpected)}"
            )

        def swap() -> None:
            self.model.load_state_dict(state_dict, strict=False)
            repack(self._packed)
            if self._fast is not None:
                self._fast.refresh()
            self.model_version = version

        self._batcher.call(swap)

    def release_memory(self) -> None:
        """Give up the KV memory for a trainer on the same GPU (mode colocate): no decode
        batch is alive between requests, so on CUDA the allocator's cached blocks go back
        to the device and the budget is 0 until :meth:`retake_memory` (a request that
        comes first retakes it). The weights stay."""
        self._batcher.call(self._release)

    def retake_memory(self) -> None:
        """Take the KV memory again before rollouts: the budget from what is free now."""
        self._batcher.call(self._retake)

    def _release(self) -> None:
        if self.memory_released:
            return
        if self._continuous is not None:
            self._continuous.release()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.kv_budget = 0
        self.memory_released = True
        self.memory_events.append(("release", self.model_version))

    def _retake(self) -> None:
        if not self.memory_released:
            return
        self.kv_budget = None
        if self.device.type == "cuda":
            _, total = torch.cuda.mem_get_info(self.device)
            used = torch.cuda.memory_allocated(self.device)
            self.kv_budget = kv_cache_budget(self.gpu_memory_utilization, total, used)
        self.memory_released = False
        self.memory_events.append(("retake", self.model_version))

    def run_in_worker(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the engine's worker thread, between decode batches.

        For torch work that shares this process with the engine (a trainer in the same
        process): on one thread it shares the engine's OpenMP team instead of starting a
        second one, which slows both down (see :mod:`trinity.rollout.batcher`).
        """
        return self._batcher.call(fn)

    def close(self) -> None:
        """Stop the worker after the queued requests are served."""
        self._batcher.close()

    def __enter__(self) -> TransformersEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- batching worker ------------------------------------------------------------

    def _set_threads(self) -> None:
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)

    def _run_requests(self, requests: list[_Request]) -> list[Any]:
        self._retake()
        with torch.inference_mode():
            return self._generate_batch(requests)

    def _generate_batch(self, requests: list[_Request]) -> list[Any]:
        """One result per request (``DELIVERED`` where its future is resolved already)."""
        if self._continuous is not None:
            return self._generate_continuous(requests)
        entries: list[DecodeEntry] = []
        for index, request in enumerate(requests):
            seed = request.params.seed
            generator = self._generator if seed is None else torch.Generator().manual_seed(seed)
            entries += [
                DecodeEntry(p, request.params, generator, index, request.cancelled)
                for p in request.prompts
            ]
        results: list[list[list[Sample]]] = [[] for _ in requests]
        for chunk in self._row_chunks(entries):
            # a cancelled request's result is never read: its rows need no decoding
            chunk = [e for e in chunk if not requests[e.request].cancelled()]
            if not chunk:
                continue
            for entry, samples in zip(chunk, self._decode(chunk), strict=True):
                results[entry.request].append(samples)
        return results

    def _generate_continuous(self, requests: list[_Request]) -> list[object]:
        """The requests' rows through the continuous decoder (rows beyond its slots wait
        for a free one), with requests queued meanwhile taken in as slots free up; each
        request's future is resolved as soon as its rows are done. Each row samples from
        its own generator."""
        every: list[_Request] = []
        samples: list[list[list[Sample]]] = []  # per request, per prompt
        left: list[int] = []  # per request, prompts not done
        owner: list[tuple[int, int]] = []  # per entry: (request, prompt)

        def entries_of(new: list[_Request]) -> tuple[list[DecodeEntry], list[list[Any]]]:
            entries: list[DecodeEntry] = []
            generators: list[list[torch.Generator]] = []
            for request in new:
                index = len(every)
                every.append(request)
                samples.append([[] for _ in request.prompts])
                left.append(len(request.prompts))
                params = request.params
                rows = row_generators(params.seed, params.n * len(request.prompts), self._generator)
                for j, prompt in enumerate(request.prompts):
                    owner.append((index, j))
                    entries.append(DecodeEntry(prompt, params, rows[0], index, request.cancelled))
                    generators.append(rows[j * params.n : (j + 1) * params.n])
            return entries, generators

        def done(entry: int, group: list[Sample]) -> None:
            index, prompt = owner[entry]
            samples[index][prompt] = group
            left[index] -= 1
            future = every[index].future
            if left[index] == 0 and future is not None and future.set_running_or_notify_cancel():
                future.set_result(samples[index])

        def more(free: int) -> tuple[list[DecodeEntry], list[list[Any]]]:
            taken = self._batcher.take_waiting(free)
            return entries_of([item for item, _ in taken])

        started = [r for r in requests if not r.cancelled()]
        entries, generators = entries_of(started)
        if entries:
            self.num_batches += 1
            try:
                self._continuous.decode(  # type: ignore[union-attr]
                    entries,
                    generators,
                    self.max_model_len,
                    self.pad_token_id,
                    self.eos_token_ids,
                    self.model_version,
                    more=more,
                    on_entry=done,
                )
            except BaseException as error:
                # the batcher answers the requests it handed over; these were taken in
                for request in every[len(started) :]:
                    future = request.future
                    if future is not None and future.set_running_or_notify_cancel():
                        future.set_exception(error)
                raise
        return [DELIVERED] * len(requests)

    def _slots_within_budget(self, capacity: int) -> int:
        """Slots of ``capacity`` columns whose KV cache fits ``kv_budget`` (CUDA)."""
        if self.kv_budget is None or not self._kv_token_bytes:
            return self.max_batch_size
        return self.kv_budget // (capacity * self._kv_token_bytes)

    def _row_chunks(self, entries: list[DecodeEntry]) -> list[list[DecodeEntry]]:
        """Split entries into decode batches of at most max_batch_size sequences (and on
        CUDA, of a KV cache within ``kv_budget``)."""
        return row_chunks(
            entries, self.max_batch_size, self.max_model_len, self._kv_token_bytes, self.kv_budget
        )

    def _decode(self, entries: list[DecodeEntry]) -> list[list[Sample]]:
        """Decode one batch; returns ``n`` samples per entry."""
        self.num_batches += 1
        target = DecodeModel(
            self.model,
            self._fast,
            self.max_model_len,
            self.pad_token_id,
            self.eos_token_ids,
            self.device,
        )
        return decode_entries(target, entries, self.model_version)

    # ---- helpers --------------------------------------------------------------------

    def _check_prompts(self, prompts: list[list[int]]) -> None:
        if not prompts:
            raise ValueError("generate needs at least one prompt")
        vocab = self.vocab_size
        for prompt in prompts:
            if not prompt:
                raise ValueError("prompts must be non-empty token id lists")
            if len(prompt) >= self.max_model_len:
                raise PromptTooLongError(
                    f"prompt has {len(prompt)} tokens, but max_model_len is {self.max_model_len}; "
                    "shorten it, raise model.max_model_len, or set "
                    "model.enable_prompt_truncation"
                )
            if min(prompt) < 0 or max(prompt) >= vocab:
                raise ValueError(f"prompt token ids must be in [0, {vocab})")

    def _eos_token_ids(self) -> set[int]:
        ids: set[int] = set()
        configured = self.model.generation_config.eos_token_id
        if configured is not None:
            ids |= set(configured) if isinstance(configured, list) else {int(configured)}
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return ids

    def _pad_token_id(self) -> int:
        for candidate in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id):
            if candidate is not None:
                return int(candidate)
        return 0  # pad positions are masked out, any valid id will do

    def _tied_aliases(self, state_dict: dict[str, torch.Tensor]) -> set[str]:
        """Parameter names that share storage with a parameter named in state_dict."""
        by_tensor: dict[int, set[str]] = {}
        for name, param in self.model.named_parameters(remove_duplicate=False):
            by_tensor.setdefault(id(param), set()).add(name)
        aliases: set[str] = set()
        for names in by_tensor.values():
            if names & state_dict.keys():
                aliases |= names
        return aliases


def _columns(entry: DecodeEntry, max_model_len: int) -> int:
    """Cache columns a row of ``entry`` may fill: its prompt and its most new tokens."""
    room = max_model_len - len(entry.prompt)
    return len(entry.prompt) + min(entry.params.max_tokens or room, room)


def row_chunks(
    entries: list[DecodeEntry],
    max_batch_size: int,
    max_model_len: int,
    token_bytes: int,
    kv_budget: int | None,
) -> list[list[DecodeEntry]]:
    """Entries in decode batches of at most ``max_batch_size`` rows and, with a
    ``kv_budget``, whose rows' KV cache (rows x longest row's columns x ``token_bytes``)
    fits it. An entry is never split: one whose rows alone exceed a limit decodes alone."""
    chunks: list[list[DecodeEntry]] = [[]]
    rows = columns = 0
    for entry in entries:
        wide = max(columns, _columns(entry, max_model_len))
        over_rows = rows + entry.params.n > max_batch_size
        over_kv = kv_budget is not None and (rows + entry.params.n) * wide * token_bytes > kv_budget
        if chunks[-1] and (over_rows or over_kv):
            chunks.append([])
            rows = 0
            wide = _columns(entry, max_model_len)
        chunks[-1].append(entry)
        rows += entry.params.n
        columns = wide
    return chunks
