"""Loading trainer checkpoints outside the framework, at the import path the user docs
name; the code is in :mod:`trinity.trainer.checkpoint_merge`.

    model = AutoModelForCausalLM.from_pretrained(model_path)
    model.load_state_dict(load_fsdp_state_dict_from_verl_checkpoint(ckpt_path))
"""

from trinity.trainer.checkpoint_merge import (
    CheckpointFormatError,
    load_fsdp_state_dict_from_verl_checkpoint,
)

__all__ = ["CheckpointFormatError", "load_fsdp_state_dict_from_verl_checkpoint"]
