"""The policy's weights going out: to the rollout engines (``weights_for_sync``) and as
a Hugging Face directory (``export_hf``, and ``huggingface/`` in every checkpoint).

Functions of a :class:`~trinity.trainer.trainer.Trainer`, whose methods of the same
names call them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from trinity.rollout.multimodal import copy_processor_files
from trinity.trainer import checkpoint as ckpt
from trinity.trainer import distributed, lora

if TYPE_CHECKING:
    from trinity.trainer.trainer import Trainer


def weights_for_sync(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The policy's parameters in the rollout engine's dtype (halves the transfer);
    with LoRA the adapter's tensors only."""
    if trainer.lora is not None:
        return lora.adapter_state_dict(trainer.model)
    if trainer.master is not None:
        # the parameters are already bf16: views, valid until the next update (every
        # consumer copies or serialises them at once)
        return {k: v.detach() for k, v in trainer.model.state_dict().items()}
    state = (
        distributed.full_state_dict(trainer.model)
        if trainer.world_size > 1
        else trainer.model.state_dict()
    )
    # copy=True: one copy whether or not the dtype changes (.to then .clone made two)
    return {k: v.detach().to(trainer.compute_dtype, copy=True) for k, v in state.items()}


def export_hf(trainer: Trainer, job_dir: Path, step: int) -> Path:
    """Write the policy as a Hugging Face model into ``global_step_<step>/actor/huggingface``.

    The next stage of a multi-stage run starts from this directory; ``trinity
    convert`` skips a step that already has it. It is written beside its place and
    renamed into it (:func:`~trinity.trainer.checkpoint.write_entries_atomic`), so a
    crash leaves the previous ``huggingface/`` whole, never half of the new one.
    """
    actor = ckpt.step_dir(job_dir, step) / "actor"
    if trainer.world_size > 1:
        state = distributed.full_state_dict(trainer.model)  # every rank takes part
        if trainer.rank == 0:

            def write(tmp: Path) -> None:
                save_hf_config(trainer, tmp / "huggingface")
                trainer.model.save_pretrained(
                    tmp / "huggingface", state_dict=state, safe_serialization=True
                )

            ckpt.write_entries_atomic(actor, write)
        return actor / "huggingface"
    # with LoRA the adapter beside it too (save_hf_config writes it into tmp/)
    ckpt.write_entries_atomic(actor, lambda tmp: save_hf_model(trainer, tmp / "huggingface"))
    trainer.logger.info("exported the policy of step %d to %s", step, actor / "huggingface")
    return actor / "huggingface"


def save_hf_model(trainer: Trainer, directory: Path) -> None:
    """Config, tokenizer and weights of a one-rank policy, loadable by
    ``AutoModelForCausalLM.from_pretrained(directory)``."""
    save_hf_config(trainer, directory)
    if trainer.lora is not None:
        lora.export_merged(trainer.model, directory)
    elif trainer.master is not None:
        # the fp32 masters, and a config that says float32 (save_pretrained writes the
        # parameters' dtype into it)
        trainer.model.save_pretrained(
            directory, state_dict=model_state(trainer), safe_serialization=True
        )
        trainer.model.config.dtype = torch.float32
        trainer.model.config.save_pretrained(directory)
    else:
        trainer.model.save_pretrained(directory, safe_serialization=True)


def save_hf_config(trainer: Trainer, directory: Path) -> None:
    """Config, generation config and tokenizer (and with LoRA the adapter beside it)."""
    if trainer.lora is not None:  # the adapter in peft's format beside huggingface/
        lora.save_adapter(trainer.model, directory.parent / lora.ADAPTER_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    trainer.model.config.save_pretrained(directory)
    if trainer.model.generation_config is not None:
        trainer.model.generation_config.save_pretrained(directory)
    trainer.tokenizer.save_pretrained(directory)
    # a vision-language model's processor, so the directory loads as the model it came from
    copy_processor_files(trainer.model_dir, directory)


def model_state(trainer: Trainer) -> dict[str, torch.Tensor]:
    """What a checkpoint keeps of the policy: all weights (the fp32 masters when the
    parameters are bf16), or with LoRA the adapter."""
    if trainer.lora is not None:
        return lora.adapter_state_dict(trainer.model)
    if trainer.master is not None:
        return trainer.master.state_dict(trainer.model)
    return trainer.model.state_dict()
