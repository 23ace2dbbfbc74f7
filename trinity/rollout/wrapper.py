"""ModelWrapper: what a workflow sees of a rollout model.

Past 400 lines on purpose: the wrapper's public calls, sync and async, with their history;
the pure preparation and packing steps live in :mod:`trinity.rollout.rollout_calls`.

It turns chat messages or plain prompts into token ids, asks the engine for samples,
and returns one :class:`~trinity.types.Experience` per sample (prompt + response
tokens, the engine's logprobs, texts, model version). Sync and async calls share the
same preparation and packing steps; only the wait differs.

With ``enable_history`` every call's experiences are also kept, in call order, until
:meth:`ModelWrapper.extract_experience_from_history` hands them over. Calls made through
the OpenAI-compatible endpoint (:meth:`ModelWrapper.get_openai_client`) go through the
same methods, so agent code written against the ``openai`` client yields experiences too.
:meth:`ModelWrapper.spawn` makes another wrapper on the same engine with a history of its
own; its OpenAI client reaches the same server under a path of its own, so concurrent
workflows, each with its own spawned wrapper, never see each other's calls.
After :meth:`ModelWrapper.close` every call raises :class:`ModelClosedError` before it
reaches the engine (the runner closes the wrappers of a task it abandoned).

    model = ModelWrapper(TransformersEngine("SmolLM2-135M-Instruct"), enable_history=True)
    exps = model.chat([{"role": "user", "content": "2+3?"}], n=4, temperature=1.0)
    client = model.get_openai_client()  # openai.OpenAI onto the same engine
    recorded = model.extract_experience_from_history()
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import torch

from trinity.rollout.history import merge_conversations
from trinity.rollout.media_messages import has_media, json_messages
from trinity.rollout.rollout_calls import (
    PreparedCall,
    pack_experiences,
    sampling_params,
    stop_strings,
)
from trinity.rollout.sampling import Sample, SamplingParams
from trinity.types import Experience

if TYPE_CHECKING:
    from trinity.rollout.engine import TransformersEngine
    from trinity.rollout.openai_admission import AdmissionLimits
    from trinity.rollout.server import OpenAIServer

# each refused call after the first waits this much longer (at most 1 s) before raising,
# so a workflow that retries on every error does not spin a core once it was abandoned
_REFUSAL_BACKOFF_S = 0.02


class ModelClosedError(RuntimeError):
    """A call on a closed :class:`ModelWrapper`; it never reached the engine."""


class ModelWrapper:
    """Chat and completion calls on a rollout engine, returning Experiences.

    Args:
        engine: the rollout engine (or anything with its interface, e.g. a remote client).
        max_prompt_tokens: prompt length that ``enable_prompt_truncation`` cuts to.
        max_response_tokens: default ``max_tokens`` when a call does not set one.
        min_response_tokens: default ``min_tokens`` (stop tokens masked before it).
        enable_prompt_truncation: cut over-long prompts (keeping their last tokens) and
            mark the experience untrainable (action_mask all False) instead of raising
            :class:`~trinity.rollout.engine.PromptTooLongError`.
        enable_history: keep every call's experiences for
            :meth:`extract_experience_from_history`.
        name: the model name the OpenAI endpoint serves it under; default: the
            engine's ``model_path``.
    """

    def __init__(
        self,
        engine: TransformersEngine,
        max_prompt_tokens: int | None = None,
        max_response_tokens: int | None = None,
        min_response_tokens: int = 1,
        enable_prompt_truncation: bool = False,
        enable_history: bool = False,
        name: str | None = None,
    ) -> None:
        self.engine = engine
        self.max_prompt_tokens = max_prompt_tokens
        self.max_response_tokens = max_response_tokens
        self.min_response_tokens = min_response_tokens
        self.enable_prompt_truncation = enable_prompt_truncation
        self.enable_history = enable_history
        self.name = name or str(getattr(engine, "model_path", "model"))
        self.history: list[Experience] = []
        self._history_lock = threading.Lock()
        self._server: OpenAIServer | None = None
        self._server_lock = threading.Lock()
        self._parent: ModelWrapper | None = None  # set by spawn
        self._scope: tuple[OpenAIServer, str] | None = None  # (parent's server, scoped URL)
        self._closed = False
        self.refused_calls = 0  # calls made after close, refused before the engine

    def spawn(self, enable_history: bool | None = None) -> ModelWrapper:
        """Another wrapper on the same engine: same settings, an empty history of its own.

        Wrappers are cheap (the engine is shared). The new one's OpenAI endpoint is this
        wrapper's server, started on first use, which serves it under a path of its own:
        requests sent through its client are recorded in its history only.
        """
        child = ModelWrapper(
            self.engine,
            max_prompt_tokens=self.max_prompt_tokens,
            max_response_tokens=self.max_response_tokens,
            min_response_tokens=self.min_response_tokens,
            enable_prompt_truncation=self.enable_prompt_truncation,
            enable_history=self.enable_history if enable_history is None else enable_history,
            name=self.name,
        )
        child._parent = self._parent or self  # the wrapper that owns the server
        return child

    @property
    def model_version(self) -> int:
        return self.engine.model_version

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def template_args(self) -> dict[str, Any]:
        """Variables the engine passes to the chat template (e.g. ``enable_thinking``).

        Whatever renders chat messages for this model outside the engine (multi-turn
        workflows, the history merge) passes them too, so its tokens match the engine's.
        """
        return dict(getattr(self.engine, "template_args", None) or {})

    # ---- calls ------------------------------------------------------------------------

    def chat(
        self,
        messages: list[dict[str, Any]],
        n: int = 1,
        *,
        response_limits: bool = True,
        tools: list[dict[str, Any]] | None = None,
        **rollout_args: Any,
    ) -> list[Experience]:
        """Sample ``n`` assistant replies to ``messages``; one Experience per reply.

        ``response_limits=False`` ignores ``max/min_response_tokens`` (the OpenAI
        endpoint's behaviour: only ``max_model_len`` bounds a reply without max_tokens).
        ``tools`` (OpenAI-style specs) go to the chat template's ``tools`` argument.
        """
        self._refuse_if_closed()
        return self._run(self._prepare_chat(messages, n, rollout_args, response_limits, tools))

    async def achat(
        self,
        messages: list[dict[str, Any]],
        n: int = 1,
        *,
        response_limits: bool = True,
        tools: list[dict[str, Any]] | None = None,
        **rollout_args: Any,
    ) -> list[Experience]:
        """Async :meth:`chat`; rendering and tokenizing run in a worker thread."""
        self._refuse_if_closed()
        prepared = await asyncio.to_thread(
            self._prepare_chat, messages, n, rollout_args, response_limits, tools
        )
        return await self._arun(prepared)

    def generate(
        self,
        prompts: list[str] | list[list[int]],
        n: int = 1,
        *,
        response_limits: bool = True,
        **rollout_args: Any,
    ) -> list[Experience]:
        """Sample ``n`` completions of each prompt (text or token ids), in prompt order."""
        self._refuse_if_closed()
        return self._run(self._prepare_text(prompts, n, rollout_args, response_limits))

    async def agenerate(
        self,
        prompts: list[str] | list[list[int]],
        n: int = 1,
        *,
        response_limits: bool = True,
        **rollout_args: Any,
    ) -> list[Experience]:
        """Async :meth:`generate`; tokenizing runs in a worker thread."""
        self._refuse_if_closed()
        prepared = await asyncio.to_thread(
            self._prepare_text, prompts, n, rollout_args, response_limits
        )
        return await self._arun(prepared)

    async def agenerate_ids(
        self, prompt_ids: list[int], n: int = 1, **rollout_args: Any
    ) -> list[Experience]:
        """Sample ``n`` continuations of a prompt given as token ids (never truncated).

        Multi-turn workflows build the context token by token, so the policy samples
        from exactly the sequence it is later trained on.
        """
        self._refuse_if_closed()
        ids = list(prompt_ids)
        params = self._params(n, rollout_args, True)
        stop = stop_strings(rollout_args.get("stop"))
        return await self._arun(
            PreparedCall([ids], [self.tokenizer.decode(ids)], [False], params, None, stop)
        )

    def logprobs(self, tokens: list[int] | torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """Logprobs of ``tokens[1:]`` under the current weights: (L - 1,) float32."""
        self._refuse_if_closed()
        ids = tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
        [values] = self.engine.compute_logprobs([ids], [1], temperature)
        return torch.tensor(values, dtype=torch.float32)

    def response_logprobs(
        self, experiences: list[Experience], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """This model's logprobs of each experience's response tokens given its prompt:
        one (R_i,) float32 tensor per experience, in one batched forward pass.

        How a teacher scores a student's samples (on-policy distillation): the same token
        ids, so the values line up with the experience's ``logprobs``.
        """
        self._refuse_if_closed()
        if not experiences:
            return []
        # a vision-language rollout's images, for an engine that takes them
        media = [e.media for e in experiences]
        extra = {"media": media} if any(m is not None for m in media) else {}
        values = self.engine.compute_logprobs(
            [e.tokens.tolist() for e in experiences],
            [e.prompt_length for e in experiences],
            temperature,
            **extra,
        )
        return [torch.tensor(v, dtype=torch.float32) for v in values]

    async def aresponse_logprobs(
        self, experiences: list[Experience], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Async :meth:`response_logprobs` (the forward pass runs in a worker thread)."""
        self._refuse_if_closed()
        return await asyncio.to_thread(self.response_logprobs, experiences, temperature)

    def top_logprobs(
        self, tokens: list[int], prompt_length: int, k: int, temperature: float = 1.0
    ) -> list[list[tuple[int, float]]]:
        """The ``k`` most likely (token id, logprob) pairs at each response position."""
        self._refuse_if_closed()
        compute = getattr(self.engine, "compute_top_logprobs", None)
        if compute is None:
            raise ValueError(f"top logprobs are not available from {type(self.engine).__name__}")
        return compute(list(tokens), prompt_length, k, temperature)

    # ---- history ----------------------------------------------------------------------

    def extract_experience_from_history(
        self, clear_history: bool = True, merge_turns: bool = False
    ) -> list[Experience]:
        """The experiences recorded since the last clear, in call order.

        Args:
            clear_history: empty the history (call this regularly: it grows with every call).
            merge_turns: join chat calls that continue each other (the next call's
                messages start with an earlier call's messages and reply) into one
                multi-turn experience whose action_mask is True on the model's replies
                only; see :func:`trinity.rollout.history.merge_conversations`.
        """
        with self._history_lock:
            experiences = list(self.history)
            if clear_history:
                self.history.clear()
        if merge_turns:
            return merge_conversations(experiences, self.tokenizer, self.template_args)
        return experiences

    def clear_history(self) -> None:
        """Drop every recorded experience."""
        with self._history_lock:
            self.history.clear()

    # ---- OpenAI-compatible endpoint --------------------------------------------------

    def serve_openai(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        limits: AdmissionLimits | None = None,
    ) -> OpenAIServer:
        """Start (once) an OpenAI-compatible HTTP server on this model, in a thread.

        A spawned wrapper uses its parent's server (started with these settings if it
        is not running yet), which serves this wrapper under its own path. ``limits``:
        the server's admission limits (default: the config's defaults).
        """
        from trinity.rollout.server import OpenAIServer

        if self._parent is not None:
            server = self._parent.serve_openai(host, port, api_key, limits)
            with self._server_lock:
                if self._scope is None or self._scope[0] is not server:
                    self._scope = (server, server.add_scope({self.name: self}))
            return server
        with self._server_lock:
            if self._server is None:
                self._server = OpenAIServer(
                    {self.name: self}, host=host, port=port, api_key=api_key, limits=limits
                )
                self._server.start()
            return self._server

    @property
    def openai_base_url(self) -> str:
        """Base URL of this model's endpoint (started on first use): ``http://host:port/v1``,
        or ``http://host:port/scoped/<key>/v1`` for a spawned wrapper."""
        server = self.serve_openai()
        return self._scope[1] if self._scope is not None else server.base_url

    def get_openai_client(self) -> Any:
        """An ``openai.OpenAI`` client onto this model; pass ``model=wrapper.name``."""
        import openai

        base_url = self.openai_base_url
        return openai.OpenAI(base_url=base_url, api_key=self._api_key() or "EMPTY")

    def get_openai_async_client(self) -> Any:
        """An ``openai.AsyncOpenAI`` client onto this model."""
        import openai

        base_url = self.openai_base_url
        return openai.AsyncOpenAI(base_url=base_url, api_key=self._api_key() or "EMPTY")

    def _api_key(self) -> str | None:
        return self.serve_openai().api_key

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Refuse every later call and stop this model's OpenAI endpoint, if one was
        started (the engine stays up); a spawned wrapper only leaves its parent's server,
        which then answers its client's requests with 404 ``scope_not_found``."""
        self._closed = True
        if self._parent is not None:
            with self._server_lock:
                if self._scope is not None:
                    self._scope[0].remove_scope(self._scope[1])
                    self._scope = None
            return
        with self._server_lock:
            if self._server is not None:
                self._server.stop()
                self._server = None

    def _refuse_if_closed(self) -> None:
        if self._closed:
            with self._history_lock:
                self.refused_calls += 1
                refused = self.refused_calls
            time.sleep(min(_REFUSAL_BACKOFF_S * (refused - 1), 1.0))
            raise ModelClosedError(
                f"model '{self.name}': this wrapper was closed, so the call was refused before "
                "reaching the engine (a runner closes the wrappers of a task it abandoned "
                "after explorer.max_timeout)"
            )

    # ---- preparation and packing ------------------------------------------------------

    def _prepare_chat(
        self,
        messages: list[dict[str, Any]],
        n: int,
        rollout_args: dict[str, Any],
        response_limits: bool,
        tools: list[dict[str, Any]] | None = None,
    ) -> PreparedCall:
        if has_media(messages):
            return self._prepare_media_chat(messages, n, rollout_args, response_limits, tools)
        if tools:
            from trinity.rollout.chat import render_chat

            ids = render_chat(self.tokenizer, messages, True, **self.template_args, tools=tools)
        else:
            ids = self.engine.apply_chat_template(messages)
        ids, truncated = self._fit_prompt(ids)
        text = self.tokenizer.decode(ids)
        params = self._params(n, rollout_args, response_limits)
        stop = stop_strings(rollout_args.get("stop"))
        return PreparedCall([ids], [text], [truncated], params, messages, stop)

    def _prepare_media_chat(
        self,
        messages: list[dict[str, Any]],
        n: int,
        rollout_args: dict[str, Any],
        response_limits: bool,
        tools: list[dict[str, Any]] | None,
    ) -> PreparedCall:
        """A chat call whose messages hold images: the engine's processor renders them
        (never truncated: a cut would split an image's tokens)."""
        render = getattr(self.engine, "render_media", None)
        if render is None:
            raise ValueError(
                f"model '{self.name}' takes no images (its engine, {type(self.engine).__name__}, "
                "has no processor); use a vision-language model or drop the image parts"
            )
        prompt = render(messages, **({"tools": tools} if tools else {}))
        text = self.tokenizer.decode(prompt.ids)
        params = self._params(n, rollout_args, response_limits)
        stop = stop_strings(rollout_args.get("stop"))
        kept = json_messages(messages)
        return PreparedCall([prompt.ids], [text], [False], params, kept, stop, prompt.media)

    def _prepare_text(
        self,
        prompts: list[str] | list[list[int]],
        n: int,
        rollout_args: dict[str, Any],
        response_limits: bool,
    ) -> PreparedCall:
        ids, texts, cuts = [], [], []
        for prompt in prompts:
            given = prompt if isinstance(prompt, list) else self.tokenizer(prompt)["input_ids"]
            fitted, cut = self._fit_prompt(list(given))
            ids.append(fitted)
            cuts.append(cut)
            texts.append(
                prompt if isinstance(prompt, str) and not cut else self.tokenizer.decode(fitted)
            )
        params = self._params(n, rollout_args, response_limits)
        stop = stop_strings(rollout_args.get("stop"))
        return PreparedCall(ids, texts, cuts, params, None, stop)

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

    def _params(
        self, n: int, rollout_args: dict[str, Any], response_limits: bool = True
    ) -> SamplingParams:
        if not response_limits:  # only max_model_len bounds the reply
            return sampling_params(n, rollout_args, 0, None)
        return sampling_params(n, rollout_args, self.min_response_tokens, self.max_response_tokens)

    def _run(self, prepared: PreparedCall) -> list[Experience]:
        media = {} if prepared.media is None else {"media": [prepared.media]}
        samples = self.engine.generate(prepared.prompt_ids, prepared.params, **media)
        return self._finish(prepared, samples)

    async def _arun(self, prepared: PreparedCall) -> list[Experience]:
        # cancelling this call cancels the engine request: its rows stop decoding
        media = {} if prepared.media is None else {"media": [prepared.media]}
        samples = await self.engine.agenerate(prepared.prompt_ids, prepared.params, **media)
        return await asyncio.to_thread(self._finish, prepared, samples)

    def _finish(self, prepared: PreparedCall, samples: list[list[Sample]]) -> list[Experience]:
        """Pack the samples and record them when history is on."""
        experiences = pack_experiences(self.tokenizer, prepared, samples)
        if self.enable_history:
            with self._history_lock:
                self.history.extend(experiences)
        return experiences
