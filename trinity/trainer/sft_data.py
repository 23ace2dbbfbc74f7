"""SFT and DPO datasets as experiences: rows -> chat-template token ids and loss masks.

Past 400 lines on purpose: every row layout below and its tokenization into loss masks.

Row layouts (``StorageConfig.format``):

- ``prompt_type: plaintext``: the ``prompt_key`` column is the user turn, preceded by a
  system turn from ``system_prompt_key`` (or ``system_prompt``); ``response_key`` is
  the assistant reply trained on.
- ``prompt_type: messages``: ``messages_key`` holds the conversation. The last message
  must be the assistant reply trained on; with ``enable_concatenated_multi_turn`` every
  assistant turn of the conversation is trained on, in one sequence.
- ``tools_key`` (either type, optional per row): a list of tool dicts given to the
  chat template.
- DPO: ``chosen_key`` and ``rejected_key`` hold the two replies to the prompt: strings
  for plaintext, lists of messages (or one string) for messages.
- CPT (continued pre-training): ``prompt_key`` holds raw text, tokenized without a chat
  template and trained on whole; the prompt is one start token, the tokenizer's BOS (its
  EOS when it has none), since a causal model cannot predict a sequence's first token.

Token ids come from rendering growing prefixes of the conversation with the chat
template (``format.chat_template``, else the tokenizer's). The text each message adds
is tokenized on its own; the tokens of a trained assistant turn (its content and
end-of-turn marker, not the ``assistant`` header the generation prompt writes) get
``action_mask`` 1, all other tokens 0. The prompt of the experience ends where the
first trained token begins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trinity.buffer.errors import TasksetExhausted
from trinity.config.schema import FormatConfig, StorageConfig
from trinity.trainer.dataset_steps import DatasetKind, dataset_reader
from trinity.types import EID, Experience

# auxiliary datasets (expert data of mix) repeat for as long as the run reads them
_ENDLESS_EPOCHS = 1_000_000


class DatasetFormatError(ValueError):
    """A dataset row does not fit the configured ``format``."""


@dataclass
class TokenizedChat:
    """A rendered conversation: token ids and, per token, whether it is trained on."""

    tokens: list[int]
    trained: list[bool]

    @property
    def prompt_length(self) -> int:
        """Tokens before the first trained one."""
        return self.trained.index(True) if True in self.trained else len(self.tokens)


def tokenize_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    trained: Sequence[bool],
    *,
    tools: list[dict[str, Any]] | None = None,
    chat_template: str | None = None,
    template_args: Mapping[str, Any] | None = None,
) -> TokenizedChat:
    """Token ids of ``messages`` with a mask: ``trained[i]`` marks assistant message i.

    ``template_args`` are variables of the chat template (e.g. ``enable_thinking``), the
    rollout engine's own, so SFT data renders as the policy's prompts do.

    Raises:
        DatasetFormatError: the template rewrites earlier turns when a turn is added
            (then prefixes cannot be split into per-turn tokens).
    """
    messages = [dict(m) for m in messages]

    def render(upto: int, generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(
            messages[:upto],
            tools=tools or None,
            chat_template=chat_template,
            tokenize=False,
            add_generation_prompt=generation_prompt,
            **(template_args or {}),
        )

    tokens: list[int] = []
    mask: list[bool] = []
    rendered = ""
    for i, message in enumerate(messages):
        pieces = []
        if message.get("role") == "assistant":
            pieces.append((render(i, True), False))  # the assistant header is not trained
        pieces.append(
            (render(i + 1, False), bool(trained[i]) and message.get("role") == "assistant")
        )
        for text, train in pieces:
            if not text.startswith(rendered):
                raise DatasetFormatError(
                    f"the chat template changes earlier turns when message {i} "
                    f"({message.get('role')}) is added, so its tokens cannot be masked per turn; "
                    "use a chat template that only appends (format.chat_template)"
                )
            ids = tokenizer(text[len(rendered) :], add_special_tokens=False)["input_ids"]
            tokens += ids
            mask += [train] * len(ids)
            rendered = text
    return TokenizedChat(tokens, mask)


@dataclass(frozen=True)
class Limits:
    """Token limits of the model (``model.max_prompt_tokens`` / ``max_model_len``)."""

    max_prompt_tokens: int | None = None
    max_model_len: int | None = None


def _fit(chat: TokenizedChat, limits: Limits) -> tuple[list[int], list[bool], int]:
    """Keep the end of an over-long prompt and cut the sequence at max_model_len."""
    tokens, mask, prompt = chat.tokens, chat.trained, chat.prompt_length
    if limits.max_prompt_tokens is not None and prompt > limits.max_prompt_tokens:
        cut = prompt - limits.max_prompt_tokens
        tokens, mask, prompt = tokens[cut:], mask[cut:], limits.max_prompt_tokens
    if limits.max_model_len is not None:
        tokens, mask = tokens[: limits.max_model_len], mask[: limits.max_model_len]
    return tokens, mask, prompt


class RowConverter:
    """Turns rows of one dataset into SFT or DPO experiences."""

    def __init__(
        self,
        tokenizer: Any,
        fmt: FormatConfig,
        *,
        kind: DatasetKind,
        limits: Limits = Limits(),
        dataset: str = "",
        template_args: Mapping[str, Any] | None = None,
        processor: Any = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.fmt = fmt
        self.kind = kind
        self.limits = limits
        self.dataset = dataset
        self.template_args = dict(template_args or {})
        # a vision-language policy's processor: SFT rows with images (trainer/sft_media.py)
        self.processor = processor

    def __call__(self, row: Mapping[str, Any], index: int) -> Experience:
        if self.kind == "dpo":
            return self.dpo(row, index)
        if self.kind == "cpt":
            return self.cpt(row, index)
        return self.sft(row, index)

    # ------------------------------------------------------------------ SFT
    def sft(self, row: Mapping[str, Any], index: int) -> Experience:
        fmt = self.fmt
        if fmt.prompt_type == "messages":
            messages = self._messages(row, index, fmt.messages_key, "format.messages_key")
            if not messages or messages[-1].get("role") != "assistant":
                raise self._error(
                    index,
                    f"the last message of '{fmt.messages_key}' must be the assistant reply to train on",
                )
            if fmt.enable_concatenated_multi_turn:
                trained = [m.get("role") == "assistant" for m in messages]
            else:
                trained = [False] * (len(messages) - 1) + [True]
        else:
            response = self._text(row, index, fmt.response_key, "format.response_key")
            messages = [
                *self._prompt_messages(row, index),
                {"role": "assistant", "content": response},
            ]
            trained = [False] * (len(messages) - 1) + [True]
        if self.processor is not None:
            media = self._media_sft(row, index, messages, trained)
            if media is not None:
                return media
        chat = self._tokenize(row, index, messages, trained)
        tokens, mask, prompt = _fit(chat, self.limits)
        if prompt >= len(tokens):
            raise self._error(
                index,
                "no assistant token is left to train on after truncation to model.max_model_len",
            )
        return Experience(
            tokens=torch.tensor(tokens, dtype=torch.long),
            prompt_length=prompt,
            action_mask=torch.tensor(mask[prompt:], dtype=torch.bool),
            eid=EID(batch=self.dataset, task=index),
            info={"dataset": self.dataset},
            messages=messages,
        )

    def _media_sft(
        self,
        row: Mapping[str, Any],
        index: int,
        messages: list[dict[str, Any]],
        trained: list[bool],
    ) -> Experience | None:
        """The row as an SFT experience with its images; None when it holds none."""
        from trinity.rollout.media import row_media
        from trinity.trainer.sft_media import MediaRowError, media_sft_row, with_media

        keys = {"image_key": self.fmt.image_key, "video_key": self.fmt.video_key}
        images, videos = row_media(dict(row), keys, f"dataset '{self.dataset}', row {index}")
        if not images and not videos:
            return None
        try:
            if sum(trained) != 1:
                raise MediaRowError("rows with images train on one (the last) assistant turn")
            return media_sft_row(
                self.processor,
                with_media(messages, images, videos),
                self.template_args,
                self.limits.max_model_len,
                self.dataset,
                index,
            )
        except MediaRowError as exc:
            raise self._error(index, str(exc)) from None

    # ------------------------------------------------------------------ CPT
    def cpt(self, row: Mapping[str, Any], index: int) -> Experience:
        text = self._text(row, index, self.fmt.prompt_key, "format.prompt_key")
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        start = self.tokenizer.bos_token_id
        if start is None:
            start = self.tokenizer.eos_token_id
        if start is None:
            raise self._error(index, "the tokenizer has neither a BOS nor an EOS token to start on")
        tokens = [start, *ids]
        if self.limits.max_model_len is not None:
            tokens = tokens[: self.limits.max_model_len]
        if len(tokens) < 2:
            raise self._error(index, f"key '{self.fmt.prompt_key}' holds no text to train on")
        return Experience(
            tokens=torch.tensor(tokens, dtype=torch.long),
            prompt_length=1,
            action_mask=torch.ones(len(tokens) - 1, dtype=torch.bool),
            eid=EID(batch=self.dataset, task=index),
            info={"dataset": self.dataset},
        )

    # ------------------------------------------------------------------ DPO
    def dpo(self, row: Mapping[str, Any], index: int) -> Experience:
        fmt = self.fmt
        if fmt.prompt_type == "messages":
            prompt = self._messages(row, index, fmt.messages_key, "format.messages_key")
        else:
            prompt = self._prompt_messages(row, index)
        sides = []
        for key, setting in (
            (fmt.chosen_key, "format.chosen_key"),
            (fmt.rejected_key, "format.rejected_key"),
        ):
            reply = self._reply(row, index, key, setting)
            chat = self._tokenize(
                row, index, prompt + reply, [False] * len(prompt) + [True] * len(reply)
            )
            sides.append(_fit(chat, self.limits))
        (chosen, _, p_chosen), (rejected, _, p_rejected) = sides
        if p_chosen != p_rejected or chosen[:p_chosen] != rejected[:p_rejected]:
            raise self._error(index, "chosen and rejected replies render different prompts")
        if p_chosen >= min(len(chosen), len(rejected)):
            raise self._error(index, "a reply is empty after truncation to model.max_model_len")
        chosen_ids = torch.tensor(chosen[p_chosen:], dtype=torch.long)
        return Experience(
            tokens=torch.tensor(chosen, dtype=torch.long),
            prompt_length=p_chosen,
            action_mask=torch.ones(chosen_ids.numel(), dtype=torch.bool),
            eid=EID(batch=self.dataset, task=index),
            info={"dataset": self.dataset},
            messages=prompt,
            chosen=chosen_ids,
            rejected=torch.tensor(rejected[p_rejected:], dtype=torch.long),
        )

    # ------------------------------------------------------------------ helpers
    def _prompt_messages(self, row: Mapping[str, Any], index: int) -> list[dict[str, Any]]:
        fmt = self.fmt
        system = row.get(fmt.system_prompt_key) if fmt.system_prompt_key else None
        system = system or fmt.system_prompt
        messages = [{"role": "system", "content": str(system)}] if system else []
        prompt = self._text(row, index, fmt.prompt_key, "format.prompt_key")
        return [*messages, {"role": "user", "content": prompt}]

    def _reply(
        self, row: Mapping[str, Any], index: int, key: str, setting: str
    ) -> list[dict[str, Any]]:
        if key not in row:
            raise self._missing(row, index, key, setting)
        value = row[key]
        if isinstance(value, str):
            return [{"role": "assistant", "content": value}]
        if self.fmt.prompt_type == "messages" and isinstance(value, Mapping):
            return [dict(value)]
        return self._messages(row, index, key, setting)

    def _messages(
        self, row: Mapping[str, Any], index: int, key: str, setting: str
    ) -> list[dict[str, Any]]:
        if key not in row:
            raise self._missing(row, index, key, setting)
        value = row[key]
        if not isinstance(value, list) or not all(
            isinstance(m, Mapping) and "role" in m for m in value
        ):
            raise self._error(
                index,
                f"key '{key}' (named by {setting}) must be a list of {{'role', 'content'}} messages",
            )
        return [dict(m) for m in value]

    def _text(self, row: Mapping[str, Any], index: int, key: str, setting: str) -> str:
        if key not in row:
            raise self._missing(row, index, key, setting)
        value = row[key]
        if value is None or isinstance(value, (list, dict)):
            raise self._error(index, f"key '{key}' (named by {setting}) must be a string")
        return str(value)

    def _tokenize(
        self,
        row: Mapping[str, Any],
        index: int,
        messages: list[dict[str, Any]],
        trained: list[bool],
    ) -> TokenizedChat:
        tools = row.get(self.fmt.tools_key) if self.fmt.tools_key else None
        if tools is not None and not (
            isinstance(tools, list) and all(isinstance(t, Mapping) for t in tools)
        ):
            raise self._error(
                index,
                f"key '{self.fmt.tools_key}' (named by format.tools_key) must be a list of dicts",
            )
        try:
            return tokenize_chat(
                self.tokenizer,
                messages,
                trained,
                tools=tools,
                chat_template=self.fmt.chat_template,
                template_args=self.template_args,
            )
        except DatasetFormatError as exc:
            raise self._error(index, str(exc)) from None

    def _missing(
        self, row: Mapping[str, Any], index: int, key: str, setting: str
    ) -> DatasetFormatError:
        return self._error(
            index, f"missing key '{key}' (named by {setting}); the row has keys {sorted(row)}"
        )

    def _error(self, index: int, message: str) -> DatasetFormatError:
        return DatasetFormatError(f"dataset '{self.dataset}', row {index} (0-based): {message}")


class DatasetSource:
    """Experiences from an SFT or DPO dataset (file or sql), ``get(n)`` rows at a time.

    Rows are read in the storage's ``task_selector`` order, ``total_epochs`` times (or
    for ``total_steps`` batches of ``batch_size``); ``endless`` repeats them for as
    long as they are read (auxiliary datasets). A DPO row is one experience holding
    both replies, which the trainer turns into two sequences.
    """

    def __init__(
        self,
        storage: StorageConfig,
        tokenizer: Any,
        *,
        kind: DatasetKind,
        batch_size: int,
        total_epochs: int = 1,
        total_steps: int | None = None,
        endless: bool = False,
        seed: int = 42,
        limits: Limits = Limits(),
        template_args: Mapping[str, Any] | None = None,
        processor: Any = None,
    ) -> None:
        self.reader = dataset_reader(
            storage,
            batch_size=batch_size,
            total_epochs=_ENDLESS_EPOCHS if endless else total_epochs,
            total_steps=None if endless else total_steps,
            seed=seed,
        )
        self.convert = RowConverter(
            tokenizer,
            storage.format,
            kind=kind,
            limits=limits,
            dataset=storage.name,
            template_args=template_args,
            processor=processor,
        )
        self._pending: list[tuple[dict[str, Any], int]] = []

    def __len__(self) -> int:
        """Batches of ``batch_size`` rows the dataset yields."""
        return len(self.reader)

    def get(self, n: int) -> list[Experience]:
        """The next ``n`` rows as experiences; fewer (or none) at the end of the data."""
        while len(self._pending) < n:
            try:
                self._pending += [(task.raw, task.index) for task in self.reader.read_batch()]
            except TasksetExhausted:
                break
        rows, self._pending = self._pending[:n], self._pending[n:]
        return [self.convert(row, index) for row, index in rows]
