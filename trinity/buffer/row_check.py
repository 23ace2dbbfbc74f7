"""What a taskset row must hold for its format, and the message when it does not.

``format_rules(fmt)`` names the key the prompt type needs (``prompt_key`` for
plaintext, ``messages_key`` for messages) with the setting that names it, so an error
can say which line of the config to change::

    train.jsonl, line 3: key 'question' (named by format.prompt_key) must be a string, got list
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["text", "messages", "any"]


@dataclass(frozen=True)
class KeyRule:
    """A key every row must have, the setting that names it, and its value's kind."""

    key: str
    setting: str
    kind: Kind = "any"


def format_rules(fmt: Mapping[str, Any]) -> list[KeyRule]:
    """The rule of the format's prompt type (none when the format names no key)."""
    prompt_type = fmt.get("prompt_type") or "plaintext"
    prompt_type = getattr(prompt_type, "value", prompt_type)  # enums carry the name in .value
    if prompt_type == "messages":
        key = fmt.get("messages_key")
        return [KeyRule(key, "format.messages_key", "messages")] if key else []
    key = fmt.get("prompt_key")
    return [KeyRule(key, "format.prompt_key", "text")] if key else []


def as_rules(required_keys: Mapping[str, str] | Iterable[KeyRule] | None) -> list[KeyRule]:
    """Rules from either ``{key: setting}`` (presence only) or KeyRules."""
    if required_keys is None:
        return []
    if isinstance(required_keys, Mapping):
        return [KeyRule(key, setting) for key, setting in required_keys.items()]
    return list(required_keys)


def row_problem(row: Mapping[str, Any], rule: KeyRule) -> tuple[str, bool] | None:
    """``(message, is_missing)`` when ``row`` breaks ``rule``, else None."""
    if rule.key not in row:
        return (
            f"missing key '{rule.key}' (named by {rule.setting}); the row has keys {sorted(row)}",
            True,
        )
    value = row[rule.key]
    wrong = _wrong_kind(value, rule.kind)
    if wrong is None:
        return None
    return f"key '{rule.key}' (named by {rule.setting}) {wrong}", False


def _wrong_kind(value: Any, kind: Kind) -> str | None:
    if kind == "text":
        # numbers are fine as prompts (a parquet column of ints); containers and null are not
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return f"must be a string, got {_type_name(value)}"
        return None
    if kind == "messages":
        if not isinstance(value, list):
            return f"must be a list of messages, got {_type_name(value)}"
        for i, message in enumerate(value):
            if (
                not isinstance(message, Mapping)
                or "role" not in message
                or "content" not in message
            ):
                return (
                    f"must be a list of {{'role': ..., 'content': ...}} messages; "
                    f"element {i} is {_short(message)}"
                )
    return None


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
