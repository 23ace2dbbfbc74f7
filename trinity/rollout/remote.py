"""A rollout engine served by another process, reached over its OpenAI-compatible API.

:class:`HttpEngine` has the interface :class:`~trinity.rollout.wrapper.ModelWrapper`
uses (tokenizer, chat template, ``generate``/``agenerate`` returning
:class:`~trinity.rollout.sampling.Sample` lists), so a workflow runs unchanged against a
model served by ``trinity debug --module inference_model``. Prompts travel as token ids
to ``/v1/completions`` and come back with the sampled token ids and their logprobs
(fields :mod:`trinity.rollout.server` adds to OpenAI's response), so the experiences
are the same as with an in-process engine.

    engine = HttpEngine("http://127.0.0.1:8000/v1", "SmolLM2-135M-Instruct", model_dir)
    model = ModelWrapper(engine)
"""

from __future__ import annotations

from typing import Any

import httpx

from trinity.rollout.chat import chat_template_args, load_tokenizer, render_chat
from trinity.rollout.sampling import Sample, SamplingParams


class RemoteModelError(RuntimeError):
    """The served model is unreachable or refused a request."""


class HttpEngine:
    """Engine interface over a trinity OpenAI-compatible server.

    Args:
        base_url: ``http://host:port/v1``.
        model: the served model name.
        tokenizer_path: a local directory with the model's tokenizer (chat templates and
            decoding happen here, without a round trip).
        api_key: the server's key, if it has one.
        timeout: seconds one request may take.
        chat_template: replaces the tokenizer's chat template (the served model's config).
        enable_thinking: passed to the chat template.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer_path: str,
        api_key: str | None = None,
        timeout: float = 600.0,
        chat_template: str | None = None,
        enable_thinking: bool | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model_path = model
        self.tokenizer = load_tokenizer(tokenizer_path, chat_template)
        self.template_args = chat_template_args(enable_thinking)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout
        served = {m["id"]: m for m in self._get("/models")["data"]}
        if model not in served:
            raise RemoteModelError(
                f"{self.base_url} does not serve '{model}'; it serves {sorted(served)}"
            )
        self.max_model_len = int(served[model]["max_model_len"])
        self.model_version = 0  # updated from every response

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True
    ) -> list[int]:
        return render_chat(self.tokenizer, messages, add_generation_prompt, **self.template_args)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        with httpx.Client(timeout=self._timeout) as client:
            response = client.post(
                self.base_url + "/completions",
                json=self._body(prompts, params),
                headers=self._headers,
            )
        return self._samples(response, len(prompts), params.n)

    async def agenerate(
        self, prompts: list[list[int]], params: SamplingParams
    ) -> list[list[Sample]]:
        async with httpx.AsyncClient(timeout=self._timeout) as client:
            response = await client.post(
                self.base_url + "/completions",
                json=self._body(prompts, params),
                headers=self._headers,
            )
        return self._samples(response, len(prompts), params.n)

    def compute_logprobs(
        self, token_ids: list[list[int]], prompt_lengths: list[int], temperature: float = 1.0
    ) -> list[list[float]]:
        raise RemoteModelError(
            "logprobs of given tokens need the engine in this process; the OpenAI API "
            "only scores tokens it samples"
        )

    def close(self) -> None:
        """Nothing to release: every call opens its own connection."""

    # ---- helpers --------------------------------------------------------------------

    def _body(self, prompts: list[list[int]], params: SamplingParams) -> dict[str, Any]:
        return {
            "model": self.model_path,
            "prompt": [list(p) for p in prompts],
            "n": params.n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "max_tokens": params.max_tokens,
            "min_tokens": params.min_tokens,
            "stop_token_ids": list(params.stop_token_ids),
            "ignore_eos": params.ignore_eos,
            "seed": params.seed,
            "logprobs": 0,
        }

    def _get(self, path: str) -> dict[str, Any]:
        try:
            response = httpx.get(self.base_url + path, headers=self._headers, timeout=10)
        except httpx.HTTPError as err:
            raise RemoteModelError(f"cannot reach {self.base_url}: {err}") from None
        return self._json(response)

    def _json(self, response: httpx.Response) -> dict[str, Any]:
        if response.status_code != 200:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:200]
            raise RemoteModelError(f"{self.base_url} answered {response.status_code}: {message}")
        return response.json()

    def _samples(self, response: httpx.Response, num_prompts: int, n: int) -> list[list[Sample]]:
        body = self._json(response)
        self.model_version = int(body.get("model_version", self.model_version))
        choices = sorted(body["choices"], key=lambda c: c["index"])
        samples = [
            Sample(
                c["token_ids"],
                c["logprobs"]["token_logprobs"],
                c["finish_reason"],
                self.model_version,
            )
            for c in choices
        ]
        return [samples[i * n : (i + 1) * n] for i in range(num_prompts)]
