"""LoRA: train a low-rank adapter on a frozen base policy (through peft).

With ``model.lora_configs`` set, the trainer wraps the policy in a peft model: only the
adapter's ``lora_A``/``lora_B`` matrices get gradients and optimizer state. A LoRA
checkpoint's ``global_step_N/actor`` holds

    model_world_size_1_rank_0.pt   the adapter's tensors only, named as peft names them
                                   (``base_model.model.<layer>.lora_A.weight``)
    lora_adapter/                  the same adapter in peft's format (adapter_config.json,
                                   adapter_model.safetensors), for ``PeftModel.from_pretrained``
    huggingface/                   the base model's config and tokenizer; ``trinity convert``
                                   writes the merged model (base + adapter) here

Synchronisation sends only the adapter. The explorer keeps the base weights of the
adapted layers and loads ``W = W_base + scaling * B @ A`` into its engine
(:class:`AdapterApplier`), so rollouts use the updated policy at full speed.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import torch

from trinity.config.schema import LoRAConfig

ADAPTER_DIR = "lora_adapter"
ADAPTER_CONFIG = "adapter_config.json"
_PREFIX = "base_model.model."
_LORA_KEY = re.compile(
    r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<which>[AB])(?:\.[^.]+)?\.weight$"
)


class LoRAError(ValueError):
    """An adapter does not fit the model or its files are incomplete."""


def _target_modules(lora: LoRAConfig) -> str | list[str]:
    names = list(lora.target_modules)
    return "all-linear" if names == ["all-linear"] else names


def _targets(model: torch.nn.Module, lora: LoRAConfig) -> dict[str, Any]:
    """peft's ``target_modules`` (and ``exclude_modules``) for ``lora``: on a
    vision-language model the adapter goes on the language side only (the vision encoder
    and projector stay as loaded). A peft without ``exclude_modules`` (before 0.14) is
    given the language side's modules by their full names instead."""
    import inspect

    from peft import LoraConfig

    from trinity.rollout.multimodal import VISION_MODULES, vision_parameters

    targets = _target_modules(lora)
    if not vision_parameters(model):
        return {"target_modules": targets}
    vision = rf".*\b({'|'.join(VISION_MODULES)})\b.*"
    if "exclude_modules" in inspect.signature(LoraConfig).parameters:
        return {"target_modules": targets, "exclude_modules": vision}
    names = [
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear)
        and not re.fullmatch(vision, name)
        and (
            name.rpartition(".")[2] != "lm_head"
            if targets == "all-linear"
            else name.rpartition(".")[2] in targets
        )
    ]
    return {"target_modules": names}


def wrap(model: torch.nn.Module, lora: LoRAConfig) -> torch.nn.Module:
    """``model`` as a peft model with a trainable adapter; the base weights are frozen.

    ``lora.path`` names an adapter directory to continue from; otherwise a new adapter
    (``B = 0``, so the wrapped model starts out equal to the base) is added.
    """
    from peft import LoraConfig, PeftModel, get_peft_model

    if lora.path:
        path = Path(lora.path)
        if not (path / ADAPTER_CONFIG).is_file():
            raise LoRAError(
                f"model.lora_configs[0].path '{lora.path}' has no {ADAPTER_CONFIG}; "
                "pass a directory saved by peft (e.g. a checkpoint's actor/lora_adapter)"
            )
        peft_model = PeftModel.from_pretrained(model, str(path), is_trainable=True)
    else:
        config = LoraConfig(
            r=lora.lora_rank,
            lora_alpha=lora.lora_alpha,
            lora_dropout=lora.lora_dropout,
            bias="none",
            task_type="CAUSAL_LM",
            **_targets(model, lora),
        )
        try:
            peft_model = get_peft_model(model, config)
        except ValueError as error:
            raise LoRAError(f"model.lora_configs[0].target_modules: {error}") from error
    _check_linear_only(peft_model)
    return peft_model


def _check_linear_only(peft_model: torch.nn.Module) -> None:
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer

    others = [
        name
        for name, module in peft_model.named_modules()
        if isinstance(module, LoraLayer) and not isinstance(module, LoraLinear)
    ]
    if others:
        raise LoRAError(
            f"LoRA on non-linear layers is not supported: {others[:3]}; "
            "name linear layers in model.lora_configs[0].target_modules"
        )


def adapter_state_dict(peft_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's tensors (fp32 copies), keyed as peft saves them."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().float().clone() for k, v in get_peft_model_state_dict(peft_model).items()}


def load_adapter_state(peft_model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put a saved adapter state back into ``peft_model``; errors if any tensor is unused."""
    from peft import set_peft_model_state_dict

    expected = set(adapter_state_dict(peft_model))
    if set(state) != expected:
        raise LoRAError(
            "the checkpoint's adapter does not match the model's: "
            f"missing {sorted(expected - set(state))[:3]}, unexpected {sorted(set(state) - expected)[:3]}"
        )
    set_peft_model_state_dict(peft_model, state)


def save_adapter(peft_model: torch.nn.Module, directory: Path) -> None:
    """Write the adapter in peft's format (adapter_config.json + adapter_model.safetensors)."""
    peft_model.save_pretrained(str(directory), safe_serialization=True)


def merged_state_dict(peft_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The base model's state dict with every adapter merged in (peft untouched)."""
    from peft.tuners.lora import LoraLayer

    deltas: dict[str, torch.Tensor] = {}
    for name, module in peft_model.named_modules():
        if isinstance(module, LoraLayer):
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    key = _base_key(name) + ".weight"
                    delta = module.get_delta_weight(adapter).detach()
                    deltas[key] = deltas.get(key, 0) + delta
    merged = {}
    for key, value in peft_model.state_dict().items():
        if ".lora_" in key:
            continue
        base = _base_key(key).replace(".base_layer.", ".")
        value = value.detach()
        merged[base] = value + deltas[base].to(value.dtype) if base in deltas else value.clone()
    return merged


def _base_key(name: str) -> str:
    return name[len(_PREFIX) :] if name.startswith(_PREFIX) else name


def is_adapter_checkpoint(actor_dir: Path) -> bool:
    return (Path(actor_dir) / ADAPTER_DIR / ADAPTER_CONFIG).is_file()


def read_adapter_config(directory: Path) -> dict[str, Any]:
    path = Path(directory) / ADAPTER_CONFIG
    if not path.is_file():
        raise LoRAError(f"{path} does not exist")
    return json.loads(path.read_text())


def scaling(adapter_config: dict[str, Any]) -> float:
    """The factor peft multiplies ``B @ A`` by (one rank and alpha for every layer)."""
    if adapter_config.get("rank_pattern") or adapter_config.get("alpha_pattern"):
        raise LoRAError("adapters with per-layer rank_pattern/alpha_pattern are not supported")
    rank, alpha = adapter_config["r"], adapter_config["lora_alpha"]
    return alpha / math.sqrt(rank) if adapter_config.get("use_rslora") else alpha / rank


def config_scaling(lora: LoRAConfig) -> float:
    """``scaling`` of the adapter ``lora`` describes (its saved config when ``path`` is set)."""
    if lora.path:
        return scaling(read_adapter_config(Path(lora.path)))
    return scaling({"r": lora.lora_rank, "lora_alpha": lora.lora_alpha})


def load_adapter_dir(directory: Path) -> dict[str, torch.Tensor]:
    """The tensors of a peft adapter directory."""
    from safetensors.torch import load_file

    directory = Path(directory)
    path = directory / "adapter_model.safetensors"
    if path.is_file():
        return load_file(path)
    legacy = directory / "adapter_model.bin"
    if legacy.is_file():
        return torch.load(legacy, map_location="cpu", weights_only=True)
    raise LoRAError(f"{directory} holds no adapter_model.safetensors")


def pair_adapter(state: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``<module>.weight`` of the base model -> (A, B) of its adapter."""
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in state.items():
        match = _LORA_KEY.match(key)
        if match is None:
            raise LoRAError(
                f"'{key}' is not a LoRA A/B weight (only linear adapters are supported)"
            )
        parts.setdefault(match["module"] + ".weight", {})[match["which"]] = tensor
    incomplete = [k for k, v in parts.items() if len(v) != 2]
    if incomplete:
        raise LoRAError(f"adapter tensors without their A/B partner: {incomplete[:3]}")
    return {k: (v["A"], v["B"]) for k, v in parts.items()}


class AdapterApplier:
    """Turns adapter versions into full weights, given the base policy's state dict.

    The base weights of the adapted layers are copied on first use, so every version is
    merged onto the original base even when ``base`` shares storage with a model that
    the merged weights are then loaded into.
    """

    def __init__(self, base: dict[str, torch.Tensor], scale: float) -> None:
        self.base = base
        self.scale = scale
        self._original: dict[str, torch.Tensor] = {}

    def full_state_dict(self, adapter: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        merged = dict(self.base)
        for key, (a, b) in pair_adapter(adapter).items():
            if key not in self.base:
                raise LoRAError(f"the adapter adapts '{key}', which the base model does not have")
            original = self._original.get(key)
            if original is None:
                original = self._original[key] = self.base[key].detach().clone()
            delta = (b.float() @ a.float()) * self.scale
            if delta.shape != original.shape:
                raise LoRAError(
                    f"{key}: adapter update {tuple(delta.shape)} vs weight {tuple(original.shape)}"
                )
            merged[key] = (original.float() + delta).to(original.dtype)
        return merged


def save_full_model(config: Any, state_dict: dict[str, torch.Tensor], directory: Path) -> None:
    """Save ``state_dict`` as a Hugging Face model of architecture ``config`` into ``directory``."""
    from trinity.rollout.multimodal import config_model_class

    with torch.device("meta"):
        model = config_model_class(config).from_config(config)
    missing, unexpected = model.load_state_dict(state_dict, assign=True, strict=False)
    model.tie_weights()
    still_meta = [n for n, p in model.named_parameters() if p.is_meta]
    if unexpected or still_meta:
        raise LoRAError(
            f"the weights do not fit {type(model).__name__}: missing {still_meta[:3]}, unexpected {unexpected[:3]}"
        )
    model.save_pretrained(str(directory), safe_serialization=True)


def export_merged(peft_model: torch.nn.Module, directory: Path) -> None:
    """Write base + adapter as one plain Hugging Face model (config and weights)."""
    save_full_model(peft_model.get_base_model().config, merged_state_dict(peft_model), directory)
