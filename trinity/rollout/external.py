"""A model served by any OpenAI-compatible endpoint (vLLM, SGLang, a hosted API), as an engine.

``model.external_model`` (Trinity-RFT's names): with ``enable``, the explorer's rollout
model is the endpoint at ``$<base_url_env>`` (key ``$<api_key_env>``) serving
``model_name`` instead of a local engine, e.g. to bench a hosted model on the eval
tasksets. Unlike :class:`~trinity.rollout.remote.HttpEngine` it needs nothing beyond
OpenAI's API: prompts are rendered and tokenized here with ``model.model_path``'s
tokenizer (its chat template), sent as text to ``/completions`` through the ``openai``
client, and the replies are tokenized back with the same tokenizer. The endpoint's
weights are its own: nothing is loaded into it (``model_version`` stays 0), and
logprobs are the endpoint's when it returns them, else 0.

    engine = OpenAIEngine.from_env("OPENAI_BASE_URL", "OPENAI_API_KEY", "qwen", tokenizer_dir)
    model = ModelWrapper(engine)
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from trinity.rollout.chat import chat_template_args, load_tokenizer, render_chat
from trinity.rollout.sampling import Sample, SamplingParams


class ExternalModelError(RuntimeError):
    """The external endpoint is not configured, unreachable, or refused a request."""


class OpenAIEngine:
    """Engine interface over an OpenAI-compatible ``/completions`` endpoint.

    Args:
        base_url: the endpoint, e.g. ``http://host:8000/v1``.
        model: the model name the endpoint serves.
        tokenizer_path: local directory of the model's tokenizer.
        max_model_len: longest prompt + response; unset: the endpoint's ``/models``
            entry's ``max_model_len`` (vLLM and trinity report it).
        api_key: sent as ``Authorization: Bearer``.
    """

    model_version = 0

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer_path: str,
        max_model_len: int | None = None,
        api_key: str | None = None,
        chat_template: str | None = None,
        enable_thinking: bool | None = None,
        timeout: float = 600.0,
    ) -> None:
        import openai

        self.base_url = base_url.rstrip("/")
        self.model_path = model
        self.tokenizer = load_tokenizer(tokenizer_path, chat_template)
        self.template_args = chat_template_args(enable_thinking)
        key = api_key or "EMPTY"
        self._client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=timeout)
        self._async = openai.AsyncOpenAI(base_url=self.base_url, api_key=key, timeout=timeout)
        self.max_model_len = max_model_len or self._served_max_model_len()

    @classmethod
    def from_env(
        cls, base_url_env: str, api_key_env: str, model: str, tokenizer_path: str, **kwargs: Any
    ) -> OpenAIEngine:
        """The endpoint whose address and key are in the environment variables named."""
        base_url = os.environ.get(base_url_env)
        if not base_url:
            raise ExternalModelError(
                f"model.external_model.base_url_env names ${base_url_env}, which is not set; "
                "export it as the endpoint's base URL (e.g. http://host:8000/v1)"
            )
        return cls(base_url, model, tokenizer_path, api_key=os.environ.get(api_key_env), **kwargs)

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True
    ) -> list[int]:
        return render_chat(self.tokenizer, messages, add_generation_prompt, **self.template_args)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        return [
            self._samples(self._client.completions.create(**self._body(p, params)), params)
            for p in prompts
        ]

    async def agenerate(
        self, prompts: list[list[int]], params: SamplingParams
    ) -> list[list[Sample]]:
        calls = [self._async.completions.create(**self._body(p, params)) for p in prompts]
        return [self._samples(r, params) for r in await asyncio.gather(*calls)]

    def load_state_dict(self, state_dict: Any, version: int) -> None:
        raise ExternalModelError(
            "model.external_model serves its own weights: the run cannot load new ones into it "
            "(use mode explore or bench)"
        )

    def close(self) -> None:
        self._client.close()

    def _served_max_model_len(self) -> int:
        import openai

        try:
            served = {m.id: m for m in self._client.models.list().data}
        except openai.OpenAIError as err:
            raise ExternalModelError(f"cannot list the models of {self.base_url}: {err}") from None
        entry = served.get(self.model_path)
        length = getattr(entry, "max_model_len", None) if entry is not None else None
        if not length:
            raise ExternalModelError(
                f"{self.base_url} does not report max_model_len for '{self.model_path}'; "
                "set model.max_model_len"
            )
        return int(length)

    def _body(self, prompt: list[int], params: SamplingParams) -> dict[str, Any]:
        max_tokens = params.max_tokens or max(1, self.max_model_len - len(prompt))
        body: dict[str, Any] = {
            "model": self.model_path,
            "prompt": self.tokenizer.decode(prompt),
            "n": params.n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": max_tokens,
            "seed": params.seed,
            "logprobs": 0,
        }
        if params.top_k > 0:  # vLLM's extension; OpenAI's API has no top_k
            body["extra_body"] = {"top_k": params.top_k}
        return body

    def _samples(self, response: Any, params: SamplingParams) -> list[Sample]:
        samples = []
        for choice in sorted(response.choices, key=lambda c: c.index):
            ids = self.tokenizer(choice.text, add_special_tokens=False)["input_ids"]
            reason = "length" if choice.finish_reason == "length" else "stop"
            if reason == "stop" and self.tokenizer.eos_token_id is not None:
                ids = [*ids, self.tokenizer.eos_token_id]  # the reply ended as the model chose
            given = (choice.logprobs.token_logprobs or []) if choice.logprobs else []
            logprobs = [float(x) for x in given] if len(given) == len(ids) else [0.0] * len(ids)
            samples.append(Sample(ids, logprobs, reason, self.model_version))
        return samples
