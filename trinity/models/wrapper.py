"""ModelWrapper: what a workflow sees of a rollout model.

It turns chat messages or plain prompts into token ids, asks the engine for samples,
and returns one :class:`~trinity.types.Experience` per sample (prompt + response
tokens, the engine's logprobs, texts, model version). Sync and async calls share the
same preparation and packing steps; only the wait differs.

    model = ModelWrapper(TransformersEngine("SmolLM2-135M-Instruct"))
    exps = model.chat([{"role": "user", "content": "2+3?"}], n=4, temperature=1.0)
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from typing import Any

import torch

from trinity.models.engine import TransformersEngine
from trinity.models.sampling import Sample, SamplingParams
from trinity.types import Experience

# rollout_args keys, each the SamplingParams field of the same name (n is chat's own argument)
_ROLLOUT_KEYS = {
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "min_tokens",
    "stop_token_ids",
    "ignore_eos",
    "seed",
}
_IGNORED_KEYS = {"logprobs"}  # logprobs are always returned


@dataclass
class _Prepared:
    """Prompts ready for the engine plus what is needed to pack the results."""

    prompt_ids: list[list[int]]
    prompt_texts: list[str]
    truncated: list[bool]
    params: SamplingParams
    messages: list[dict[str, Any]] | None


class ModelWrapper:
    """Chat and completion calls on a rollout engine, returning Experiences.

    Args:
        engine: the rollout engine.
        max_prompt_tokens: prompt length that ``enable_prompt_truncation`` cuts to.
        max_response_tokens: default ``max_tokens`` when a call does not set one.
        min_response_tokens: default ``min_tokens`` (stop tokens masked before it).
        enable_prompt_truncation: cut over-long prompts (keeping their last tokens) and
            mark the experience untrainable (action_mask all False) instead of raising
            :class:`~trinity.models.engine.PromptTooLongError`.
    """

    def __init__(
        self,
        engine: TransformersEngine,
        max_prompt_tokens: int | None = None,
        max_response_tokens: int | None = None,
        min_response_tokens: int = 1,
        enable_prompt_truncation: bool = False,
    ) -> None:
        self.engine = engine
        self.max_prompt_tokens = max_prompt_tokens
        self.max_response_tokens = max_response_tokens
        self.min_response_tokens = min_response_tokens
        self.enable_prompt_truncation = enable_prompt_truncation

    @property
    def model_version(self) -> int:
        return self.engine.model_version

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    # ---- calls ------------------------------------------------------------------------

    def chat(
        self, messages: list[dict[str, Any]], n: int = 1, **rollout_args: Any
    ) -> list[Experience]:
        """Sample ``n`` assistant replies to ``messages``; one Experience per reply."""
        prepared = self._prepare_chat(messages, n, rollout_args)
        return self._pack(prepared, self.engine.generate(prepared.prompt_ids, prepared.params))

    async def achat(
        self, messages: list[dict[str, Any]], n: int = 1, **rollout_args: Any
    ) -> list[Experience]:
        """Async :meth:`chat`."""
        prepared = self._prepare_chat(messages, n, rollout_args)
        samples = await self.engine.agenerate(prepared.prompt_ids, prepared.params)
        return self._pack(prepared, samples)

    def generate(self, prompts: list[str], n: int = 1, **rollout_args: Any) -> list[Experience]:
        """Sample ``n`` completions of each raw text prompt; experiences in prompt order."""
        prepared = self._prepare_text(prompts, n, rollout_args)
        return self._pack(prepared, self.engine.generate(prepared.prompt_ids, prepared.params))

    async def agenerate(
        self, prompts: list[str], n: int = 1, **rollout_args: Any
    ) -> list[Experience]:
        """Async :meth:`generate`."""
        prepared = self._prepare_text(prompts, n, rollout_args)
        samples = await self.engine.agenerate(prepared.prompt_ids, prepared.params)
        return self._pack(prepared, samples)

    def logprobs(self, tokens: list[int] | torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """Logprobs of ``tokens[1:]`` under the current weights: (L - 1,) float32."""
        ids = tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
        [values] = self.engine.compute_logprobs([ids], [1], temperature)
        return torch.tensor(values, dtype=torch.float32)

    async def alogprobs(
        self, tokens: list[int] | torch.Tensor, temperature: float = 1.0
    ) -> torch.Tensor:
        """Async :meth:`logprobs` (runs the forward pass in a worker thread)."""
        return await asyncio.to_thread(self.logprobs, tokens, temperature)

    # ---- preparation and packing ------------------------------------------------------

    def _prepare_chat(
        self, messages: list[dict[str, Any]], n: int, rollout_args: dict[str, Any]
    ) -> _Prepared:
        ids = self.engine.apply_chat_template(messages)
        ids, truncated = self._fit_prompt(ids)
        text = self.tokenizer.decode(ids)
        return _Prepared([ids], [text], [truncated], self._params(n, rollout_args), messages)

    def _prepare_text(self, prompts: list[str], n: int, rollout_args: dict[str, Any]) -> _Prepared:
        fitted = [self._fit_prompt(self.tokenizer(p)["input_ids"]) for p in prompts]
        ids = [f[0] for f in fitted]
        texts = [
            self.tokenizer.decode(i) if cut else p
            for i, p, (_, cut) in zip(ids, prompts, fitted, strict=True)
        ]
        return _Prepared(ids, texts, [f[1] for f in fitted], self._params(n, rollout_args), None)

    def _fit_prompt(self, ids: list[int]) -> tuple[list[int], bool]:
        """Cut an over-long prompt when truncation is on; returns the ids and whether
        they were cut. Without truncation the engine rejects an over-long prompt."""
        if not self.enable_prompt_truncation:
            return ids, False
        longest = self.engine.max_model_len - 1  # leave room for one response token
        if self.max_prompt_tokens is not None:
            longest = min(longest, self.max_prompt_tokens)
        if len(ids) <= longest:
            return ids, False
        # keep the end: a chat prompt ends with the assistant header
        return ids[len(ids) - longest :], True

    def _params(self, n: int, rollout_args: dict[str, Any]) -> SamplingParams:
        unknown = set(rollout_args) - _ROLLOUT_KEYS - _IGNORED_KEYS
        if unknown:
            raise TypeError(
                f"unknown rollout_args {sorted(unknown)}; allowed: "
                f"{sorted(_ROLLOUT_KEYS | _IGNORED_KEYS)}"
            )
        values: dict[str, Any] = {"n": n, "min_tokens": self.min_response_tokens}
        if self.max_response_tokens is not None:
            values["max_tokens"] = self.max_response_tokens
        for key, value in rollout_args.items():
            if key in _ROLLOUT_KEYS and value is not None:
                values[key] = value
        if values.get("max_tokens") is not None:
            values["min_tokens"] = min(values["min_tokens"], values["max_tokens"])
        return SamplingParams(**values)

    def _pack(self, prepared: _Prepared, samples: list[list[Sample]]) -> list[Experience]:
        experiences = []
        for ids, text, truncated, per_prompt in zip(
            prepared.prompt_ids, prepared.prompt_texts, prepared.truncated, samples, strict=True
        ):
            for sample in per_prompt:
                response_text = self.tokenizer.decode(sample.token_ids, skip_special_tokens=True)
                messages = None
                if prepared.messages is not None:
                    messages = copy.deepcopy(prepared.messages)
                    messages.append({"role": "assistant", "content": response_text})
                experiences.append(
                    Experience(
                        tokens=torch.tensor(ids + sample.token_ids, dtype=torch.long),
                        prompt_length=len(ids),
                        logprobs=torch.tensor(sample.logprobs, dtype=torch.float32),
                        # a truncated prompt's experience is kept for metrics, not trained on
                        action_mask=torch.full((len(sample.token_ids),), not truncated),
                        prompt_text=text,
                        response_text=response_text,
                        messages=messages,
                        info={
                            "model_version": sample.model_version,
                            "finish_reason": sample.finish_reason,
                            "prompt_truncated": truncated,
                        },
                    )
                )
        return experiences
