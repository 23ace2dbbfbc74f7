"""Chat rendering: a model's tokenizer with the run's chat template, and chat messages
rendered to prompt token ids.

    tokenizer = load_tokenizer(model_dir, chat_template=None)
    prompt = render_chat(tokenizer, [{"role": "user", "content": "2+3?"}])
"""

from __future__ import annotations

from typing import Any


def render_chat(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool = True,
    **template_args: Any,
) -> list[int]:
    """Token ids of ``messages`` rendered with ``tokenizer``'s chat template.

    ``template_args`` (e.g. ``enable_thinking``) are variables of the template; a
    template that does not use one ignores it.
    """
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt, **template_args
    )
    # the template already writes the special tokens it wants
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def load_tokenizer(path: Any, chat_template: str | None = None) -> Any:
    """The tokenizer in ``path``, with ``chat_template`` (when given) replacing its own."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if chat_template:
        tokenizer.chat_template = chat_template
    return tokenizer


def chat_template_args(enable_thinking: bool | None) -> dict[str, Any]:
    """Variables every chat rendering passes to the template."""
    return {} if enable_thinking is None else {"enable_thinking": enable_thinking}
