"""The rollout engine of a vision-language model: the text engine's batching, weight
swaps and memory handling, with a processor, prompts that carry images, and the decode
loop of :mod:`trinity.rollout.media_decode`.

:func:`rollout_engine` builds the engine a model directory needs: this one for an
image-text-to-text model (:func:`trinity.rollout.multimodal.is_vision_language`), the
text engine otherwise. A vision-language model takes transformers' forward on the CPU
or on its CUDA device; the fused decoder, packed linears and continuous batching are
for text models.

    engine = rollout_engine(model_path="path/to/Qwen2.5-VL-3B-Instruct")
    prompt = engine.render_media([{"role": "user", "content": [
        {"type": "image", "image": "cat.png"}, {"type": "text", "text": "What is it?"}]}])
    [[sample]] = engine.generate([prompt.ids], SamplingParams(), media=[prompt.media])
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch

from trinity.rollout.engine import _DTYPES, TransformersEngine, _Request
from trinity.rollout.media_decode import MediaEntry, decode_media_entries, score_with_media
from trinity.rollout.model_path import resolve_model_path
from trinity.rollout.multimodal import (
    MediaInputs,
    MediaPrompt,
    is_vision_language,
    load_processor,
    model_class,
    render_media_chat,
)
from trinity.rollout.sampling import Sample, SamplingParams


@dataclass
class _MediaRequest(_Request):
    media: list[MediaInputs | None] | None = None  # one per prompt


def rollout_engine(**engine_args: Any) -> TransformersEngine:
    """The engine for ``engine_args["model_path"]``: :class:`VisionEngine` for a
    vision-language model, else :class:`TransformersEngine`."""
    path = resolve_model_path(engine_args["model_path"])
    cls = VisionEngine if is_vision_language(path) else TransformersEngine
    return cls(**engine_args)


class VisionEngine(TransformersEngine):
    """Rollout engine of an image-text-to-text model (same arguments as
    :class:`TransformersEngine`; ``pack_weights`` and ``fast_decode`` do not apply)."""

    processor: Any

    def __init__(self, model_path: str, *args: Any, chat_template: str | None = None, **kw: Any):
        # the processor renders the prompts: it takes the run's template too
        self._chat_template = chat_template
        super().__init__(model_path, *args, chat_template=chat_template, **kw)

    def _load(
        self,
        path: Any,
        dtype: str,
        max_model_len: int | None,
        pack_weights: bool,
        fast_decode: bool,
        override_config: Mapping[str, Any] | None,
    ) -> None:
        self.model = self._pretrained(model_class(path), path, dtype, override_config)
        self.processor = load_processor(path, self._chat_template)
        self.tokenizer = self.processor.tokenizer
        if not getattr(self.tokenizer, "chat_template", None):
            # multi-turn workflows render with the tokenizer: the processor's template
            self.tokenizer.chat_template = self.processor.chat_template
        text_config = self.model.config.get_text_config()
        self.max_model_len = max_model_len or int(text_config.max_position_embeddings)
        self._fast = None
        self._packed = []
        self.decode_path = "transformers-vision"
        self.decode_mode = "reference"
        self._continuous = None
        self._measure_kv(text_config, _DTYPES[dtype])
        self.eos_token_ids = self._eos_token_ids()
        self.pad_token_id = self._pad_token_id()

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_input_embeddings().num_embeddings)

    # ---- prompts ----------------------------------------------------------------------

    def render_media(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **extra: Any
    ) -> MediaPrompt:
        """Token ids of ``messages`` (images expanded by the processor) and their images'
        model inputs (None when the messages hold no image)."""
        return render_media_chat(
            self.processor, messages, add_generation_prompt, **self.template_args, **extra
        )

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True
    ) -> list[int]:
        return self.render_media(messages, add_generation_prompt).ids

    # ---- requests ---------------------------------------------------------------------

    def submit(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        media: Sequence[MediaInputs | None] | None = None,
    ) -> Future:
        """As :meth:`TransformersEngine.submit`; ``media``: each prompt's images."""
        self._check_prompts(prompts)
        if media is not None and len(media) != len(prompts):
            raise ValueError(f"{len(media)} media inputs for {len(prompts)} prompts")
        request = _MediaRequest([list(p) for p in prompts], params, media=list(media or []))
        request.future = self._batcher.submit(request)
        return request.future

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        media: Sequence[MediaInputs | None] | None = None,
    ) -> list[list[Sample]]:
        return self.submit(prompts, params, media).result()

    async def agenerate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        media: Sequence[MediaInputs | None] | None = None,
    ) -> list[list[Sample]]:
        return await asyncio.wrap_future(self.submit(prompts, params, media))

    def compute_logprobs(
        self,
        token_ids: list[list[int]],
        prompt_lengths: list[int],
        temperature: float = 1.0,
        media: Sequence[MediaInputs | None] | None = None,
    ) -> list[list[float]]:
        """As :meth:`TransformersEngine.compute_logprobs`; ``media``: each sequence's
        prompt images (their rows are scored one by one, with them)."""
        if media is None or all(m is None for m in media):
            return super().compute_logprobs(token_ids, prompt_lengths, temperature)
        if len(media) != len(token_ids):
            raise ValueError(f"{len(media)} media inputs for {len(token_ids)} sequences")
        scale = temperature if temperature > 0 else 1.0
        return self._batcher.call(
            lambda: [
                score_with_media(self.model, ids, plen, scale, m, self.device)
                for ids, plen, m in zip(token_ids, prompt_lengths, media, strict=True)
            ]
        )

    def _generate_batch(self, requests: list[_Request]) -> list[list[list[Sample]]]:
        entries: list[MediaEntry] = []
        for index, request in enumerate(requests):
            seed = request.params.seed
            generator = self._generator if seed is None else torch.Generator().manual_seed(seed)
            media = getattr(request, "media", None) or [None] * len(request.prompts)
            entries += [
                MediaEntry(p, request.params, generator, index, request.cancelled, m)
                for p, m in zip(request.prompts, media, strict=True)
            ]
        results: list[list[list[Sample]]] = [[] for _ in requests]
        for chunk in self._row_chunks(entries):  # type: ignore[arg-type]
            chunk = [e for e in chunk if not requests[e.request].cancelled()]
            if not chunk:
                continue
            self.num_batches += 1
            samples = decode_media_entries(
                self.model,
                chunk,  # type: ignore[arg-type]
                self.model_version,
                max_model_len=self.max_model_len,
                pad_token_id=self.pad_token_id,
                eos_token_ids=self.eos_token_ids,
                device=self.device,
            )
            for entry, per_entry in zip(chunk, samples, strict=True):
                results[entry.request].append(per_entry)
        return results
