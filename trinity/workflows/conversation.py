"""A multi-turn rollout kept as one token sequence, with the assistant's tokens marked.

The policy samples every turn from the sequence it will be trained on: the first
prompt is the chat template's rendering of the opening messages; each assistant turn
appends the sampled token ids verbatim (action_mask True, with their logprobs); each
environment or tool reply appends the tokens the chat template puts between the end of
that assistant message and the next generation prompt (action_mask False, logprob 0).

That in-between text is found by rendering the history twice (before and after the
new messages) and taking the difference, so it is exactly what the template writes,
including the end-of-turn marker after an assistant message that hit ``max_tokens``.
Every rendering passes the variables the engine gives the template
(``ModelWrapper.template_args``, e.g. ``enable_thinking``), so the first prompt is the
one the engine renders for the same messages and the turns agree with it.
A template that renders earlier turns differently once later ones exist (e.g. one
that drops past reasoning) cannot be spliced this way and raises
:class:`TemplateMismatchError`.

    conv = Conversation(model, [{"role": "user", "content": "Guess my number."}])
    reply = await conv.sample(temperature=1.0)
    conv.add({"role": "user", "content": "Higher."})
    exp = conv.to_experience()  # whole conversation, action_mask on reply tokens only
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from trinity.types import Experience

if TYPE_CHECKING:
    from trinity.rollout.wrapper import ModelWrapper
    from trinity.workflows.envs import TextEnv


class TemplateMismatchError(ValueError):
    """The chat template does not render the conversation as a growing prefix."""


class Conversation:
    """Messages of one rollout and the token sequence that holds them.

    Attributes:
        tokens: (L,) ids of the whole conversation so far.
        prompt_length: length of the opening prompt; the "response" is the rest.
        action_mask: (L - prompt_length,) True on tokens the policy sampled.
        logprobs: (L - prompt_length,) sampling logprobs, 0.0 on the others.
        truncated: the conversation hit ``max_model_len`` and was cut short.
    """

    def __init__(
        self,
        model: ModelWrapper,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = model.tokenizer
        self.tools = tools or None
        # the engine's template variables (e.g. enable_thinking): every rendering here
        # is the text the engine would render for the same messages
        self.template_args = model.template_args
        self.max_model_len = int(model.engine.max_model_len)
        self.messages = [dict(m) for m in messages]
        self._text = self.render(self.messages)
        self.tokens: list[int] = self._encode(self._text)
        self.prompt_length = len(self.tokens)
        self.action_mask: list[bool] = []
        self.logprobs: list[float] = []
        self.truncated = False
        self.turns = 0  # assistant turns sampled
        self.model_version = model.model_version
        self.temperature: float | None = None  # of the replies' logprobs, one for all
        self._last_stop: int | None = None  # id of the stop token ending the last reply

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        """The chat template's text for ``messages`` (with this conversation's tools and
        the model's template variables, as the engine renders them)."""
        kwargs = {"tools": self.tools} if self.tools else {}
        return self.tokenizer.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **self.template_args,
            **kwargs,
        )

    def _encode(self, text: str) -> list[int]:
        # the template writes the special tokens it wants
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @property
    def room(self) -> int:
        """Tokens left before ``max_model_len``."""
        return self.max_model_len - len(self.tokens)

    async def sample(self, **rollout_args: Any) -> str | None:
        """Sample the next assistant turn and append it; None when no room is left."""
        if self.room < 1:
            self.truncated = True
            return None
        limit = rollout_args.get("max_tokens") or self.model.max_response_tokens or self.room
        rollout_args = {**rollout_args, "max_tokens": min(int(limit), self.room)}
        [exp] = await self.model.agenerate_ids(self.tokens, n=1, **rollout_args)
        if self.turns and exp.temperature != self.temperature:
            raise ValueError(
                f"Conversation.sample: temperature {exp.temperature} after turns sampled at "
                f"{self.temperature}; one experience trains at one temperature"
            )
        self.temperature = exp.temperature
        ids = exp.response_tokens.tolist()
        self.tokens += ids
        self.action_mask += [True] * len(ids)
        self.logprobs += exp.logprobs.tolist()
        self.model_version = exp.model_version
        stopped = exp.info.get("finish_reason") == "stop"
        special = set(self.tokenizer.all_special_ids)
        self._last_stop = ids[-1] if ids and stopped and ids[-1] in special else None
        text = exp.response_text or ""
        self.messages.append({"role": "assistant", "content": text})
        self.turns += 1
        return text

    async def play(self, env: TextEnv, max_turns: int, **rollout_args: Any) -> bool:
        """Alternate sampled replies with ``env``'s observations until the environment is
        done, ``max_turns`` replies were sampled, or no room is left; returns whether the
        environment ended the episode."""
        while self.turns < max_turns:
            reply = await self.sample(**rollout_args)
            if reply is None:
                return False
            step = env.step(reply)
            if step.done:
                return True
            if self.turns == max_turns or not self.add(
                {"role": "user", "content": step.observation}
            ):
                return False
        return False

    def add(self, *messages: dict[str, Any]) -> bool:
        """Append environment / tool / user messages after the last assistant turn.

        Returns False (and appends nothing) when they leave no room for another reply.
        """
        if not self.messages or self.messages[-1]["role"] != "assistant":
            raise ValueError("Conversation.add follows an assistant turn; call sample() first")
        new_messages = [*self.messages, *(dict(m) for m in messages)]
        new_text = self.render(new_messages)
        between = self._between(new_text)
        ids = self._encode(between)
        if len(ids) + 1 > self.room:
            self.truncated = True
            return False
        self.messages = new_messages
        self._text = new_text
        self.tokens += ids
        self.action_mask += [False] * len(ids)
        self.logprobs += [0.0] * len(ids)
        return True

    def _between(self, new_text: str) -> str:
        """Template text after the last reply's sampled tokens, up to the next prompt."""
        reply = self.messages[-1]["content"]
        if not new_text.startswith(self._text):
            raise TemplateMismatchError(
                "the chat template renders earlier turns differently once later messages "
                "exist; multi-turn workflows need a template whose renderings grow by appending"
            )
        rest = new_text[len(self._text) :]
        for content in (reply, reply.strip()):
            if rest.startswith(content):
                rest = rest[len(content) :]
                break
        else:
            raise TemplateMismatchError(
                f"the chat template does not write the assistant reply verbatim: expected "
                f"{reply[:60]!r} after the generation prompt, found {rest[:60]!r}"
            )
        if self._last_stop is not None:
            # the reply's own stop token (e.g. <|im_end|>) is already in the sequence
            stop_text = self.tokenizer.decode([self._last_stop])
            if rest.startswith(stop_text):
                rest = rest[len(stop_text) :]
        return rest

    def to_experience(self) -> Experience:
        """The whole conversation as one Experience (reward still unset)."""
        assistant = [m["content"] for m in self.messages if m["role"] == "assistant"]
        return Experience(
            tokens=torch.tensor(self.tokens, dtype=torch.long),
            prompt_length=self.prompt_length,
            logprobs=torch.tensor(self.logprobs, dtype=torch.float32),
            action_mask=torch.tensor(self.action_mask, dtype=torch.bool),
            prompt_text=self.tokenizer.decode(self.tokens[: self.prompt_length]),
            response_text=assistant[-1] if assistant else "",
            messages=[dict(m) for m in self.messages],
            temperature=self.temperature,
            info={
                "model_version": self.model_version,
                "turns": self.turns,
                "truncated": self.truncated,
            },
        )
