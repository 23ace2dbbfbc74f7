"""``model.override_config``: entries that replace those of a model's ``config.json``.

veRL's key, applied before the model is built wherever the policy is built (the
trainer's actor and reference, the rollout engines), so the engines decode with the
config the trainer trains with; the critic has its own (``critic.model.override_config``).
A nested mapping updates the sub-config or dict of that name
(``rope_parameters: {rope_theta: 5e5}``) rather than replacing it.

    config = model_config("path/to/model", {"attention_dropout": 0.1})
    model = AutoModelForCausalLM.from_pretrained("path/to/model", config=config)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def model_config(model_dir: str | Path, override: Mapping[str, Any] | None) -> Any:
    """The ``PretrainedConfig`` of ``model_dir`` with ``override`` applied, or None when
    there is nothing to override (``from_pretrained`` then reads the config itself)."""
    if not override:
        return None
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    apply_override(config, override)
    return config


def apply_override(config: Any, override: Mapping[str, Any]) -> None:
    """Set each entry of ``override`` on ``config``; mappings merge into sub-configs and
    into dict entries (``rope_parameters: {rope_theta: ...}`` keeps ``rope_type``)."""
    for key, value in override.items():
        current = getattr(config, key, None)
        if isinstance(value, Mapping) and hasattr(current, "to_dict"):
            apply_override(current, value)
        elif isinstance(value, Mapping) and isinstance(current, dict):
            setattr(config, key, _merged(current, value))
        else:
            setattr(config, key, _plain(value))


def _merged(current: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(current)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    """OmegaConf containers as dicts and lists (a config must serialise to JSON)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
