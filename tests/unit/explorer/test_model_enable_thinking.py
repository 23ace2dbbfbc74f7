"""``model.enable_thinking`` (upstream's place for it) reaches the rollout engine's chat
template as its ``enable_thinking`` variable, over ``explorer.rollout_model``'s value."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from trinity.config import config_from_dict, resolve
from trinity.explorer.engines import RolloutEngines

# a thinking-capable template in miniature: what follows the assistant header
# depends on enable_thinking (undefined / true / false)
TEMPLATE = (
    "{%- for m in messages -%}{{ m['role'] + ': ' + m['content'] + '\\n' }}{%- endfor -%}"
    "{%- if enable_thinking is not defined %}assistant:"
    "{%- elif enable_thinking %}assistant: <think>"
    "{%- else %}assistant: <think></think>{%- endif -%}"
)


@pytest.mark.parametrize(
    ("model_value", "rollout_value", "tail"),
    [
        (True, False, "assistant: <think>"),  # model.enable_thinking wins
        (False, True, "assistant: <think></think>"),
        (None, True, "assistant: <think>"),  # unset: the rollout model's value
    ],
)
def test_model_enable_thinking_renders_the_rollout_prompt(
    tiny_model_dir: Path, tmp_path: Path, model_value, rollout_value, tail: str
) -> None:
    raw = {
        "checkpoint_root_dir": str(tmp_path),
        "model": {
            "model_path": str(tiny_model_dir),
            "max_prompt_tokens": 64,
            "max_response_tokens": 8,
            "dtype": "float32",
            "custom_chat_template": TEMPLATE,
            "enable_thinking": model_value,
        },
        "explorer": {"rollout_model": {"enable_thinking": rollout_value}},
    }
    cfg = resolve(config_from_dict(raw), now=datetime(2025, 1, 1))
    engines = RolloutEngines.from_config(cfg, str(tiny_model_dir))
    try:
        engine = engines.engines[0]
        prompt = engine.apply_chat_template([{"role": "user", "content": "hi"}])
        assert engine.tokenizer.decode(prompt).endswith(tail)
    finally:
        engines.close()
