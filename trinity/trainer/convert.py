"""``trinity convert``: trainer checkpoints -> Hugging Face model directories.

For every ``global_step_N/actor`` found, the rank files are merged into one state dict
and saved as ``actor/huggingface/model.safetensors`` beside the config and tokenizer the
trainer wrote there (or those of ``--base-model-dir``). Steps that already hold a
``model.safetensors`` are skipped, so the command can be re-run safely.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

_STEP = re.compile(r"^global_step_\d+$")


class ConvertError(RuntimeError):
    """A checkpoint could not be converted."""


def find_step_dirs(path: str | Path) -> list[Path]:
    """The ``global_step_*`` dirs meant by ``path``: itself, an ancestor, or all below it."""
    path = Path(path).resolve()
    if not path.exists():
        raise ConvertError(f"checkpoint dir '{path}' does not exist")
    for candidate in (path, *path.parents):
        if _STEP.match(candidate.name):
            return [candidate]
    found = sorted(
        (p for p in path.rglob("global_step_*") if p.is_dir() and _STEP.match(p.name)),
        key=lambda p: (str(p.parent), int(p.name.rsplit("_", 1)[1])),
    )
    if not found:
        raise ConvertError(f"no global_step_<N> directories under '{path}'")
    return found


def convert(
    checkpoint_dir: str | Path, base_model_dir: str | Path | None = None
) -> list[tuple[Path, str]]:
    """Convert every checkpoint under ``checkpoint_dir``; returns (hf_dir, status) pairs."""
    results = []
    for step_dir in find_step_dirs(checkpoint_dir):
        actor = step_dir / "actor"
        if not actor.is_dir():
            raise ConvertError(f"'{step_dir}' has no actor/ directory")
        results.append((actor / "huggingface", convert_actor(actor, base_model_dir)))
    return results


def convert_actor(actor_dir: Path, base_model_dir: str | Path | None = None) -> str:
    """Write ``actor_dir/huggingface``; returns "converted" or "skipped".

    The new directory is written beside the old one and renamed into its place
    (:func:`~trinity.trainer.checkpoint.write_entries_atomic`): a crash leaves the old
    one (the trainer's config and tokenizer) or the complete new one."""
    from trinity.trainer import checkpoint as ckpt
    from trinity.trainer.checkpoint_merge import load_fsdp_state_dict_from_verl_checkpoint

    ckpt.restore_entries(actor_dir)  # what an interrupted export or convert moved aside
    hf_dir = actor_dir / "huggingface"
    if (hf_dir / "model.safetensors").exists() or (
        hf_dir / "model.safetensors.index.json"
    ).exists():
        return "skipped"
    state_dict = load_fsdp_state_dict_from_verl_checkpoint(str(actor_dir))
    ckpt.write_entries_atomic(
        actor_dir, lambda tmp: _write_hf_dir(actor_dir, state_dict, base_model_dir, tmp)
    )
    return "converted"


def _write_hf_dir(
    actor_dir: Path, state_dict: dict, base_model_dir: str | Path | None, tmp: Path
) -> None:
    """``tmp/huggingface``: ``actor_dir/huggingface``'s files with the merged weights."""
    from transformers import AutoConfig, AutoTokenizer

    from trinity.trainer import lora

    hf_dir = actor_dir / "huggingface"
    out = tmp / "huggingface"
    if hf_dir.exists():
        shutil.copytree(hf_dir, out)
    if lora.is_adapter_checkpoint(actor_dir):
        config_dir = _merge_adapter(actor_dir, state_dict, base_model_dir, out)
    else:
        if any(".lora_A." in k for k in state_dict):
            raise ConvertError(
                f"'{actor_dir}' holds LoRA adapter weights without {lora.ADAPTER_DIR}/{lora.ADAPTER_CONFIG} "
                "(a weights-only save for synchronisation); convert a full checkpoint of the run"
            )
        config_dir = hf_dir if (hf_dir / "config.json").exists() else None
        if config_dir is None:
            if base_model_dir is None:
                raise ConvertError(
                    f"'{hf_dir}' has no config.json; pass --base-model-dir with the base model's directory"
                )
            config_dir = Path(base_model_dir)
        lora.save_full_model(AutoConfig.from_pretrained(config_dir), state_dict, out)
    if not (out / "tokenizer_config.json").exists():
        AutoTokenizer.from_pretrained(config_dir).save_pretrained(out)


def _merge_adapter(
    actor_dir: Path, adapter: dict, base_model_dir: str | Path | None, out: Path
) -> Path:
    """Save base + ``adapter`` (a LoRA checkpoint's tensors) as one model into ``out``;
    returns the base model's directory. The base is ``--base-model-dir``, else the one the
    adapter was trained on (``base_model_name_or_path`` of its adapter_config.json)."""
    import torch

    from trinity.rollout.multimodal import model_class
    from trinity.trainer import lora

    adapter_config = lora.read_adapter_config(actor_dir / lora.ADAPTER_DIR)
    base = base_model_dir or adapter_config.get("base_model_name_or_path")
    if not base or not Path(base).is_dir():
        raise ConvertError(
            f"'{actor_dir}' is a LoRA checkpoint whose base model '{base}' is not a local directory; "
            "pass --base-model-dir with the base model the adapter was trained on"
        )
    model = model_class(base).from_pretrained(base, dtype="auto")
    applier = lora.AdapterApplier(model.state_dict(), lora.scaling(adapter_config))
    try:
        merged = applier.full_state_dict(adapter)
    except lora.LoRAError as error:
        raise ConvertError(
            f"'{actor_dir}': {error} (is --base-model-dir the adapter's base?)"
        ) from error
    with torch.no_grad():
        model.load_state_dict(merged)
    model.save_pretrained(str(out), safe_serialization=True)
    return Path(base)
