"""The actor's forward over a vision-language model's rows: the prompt images' pixel
values with the tokens, and the model's own position ids (3-D rotary positions for
Qwen-VL), the same inputs the rollout engine prefilled with, so both compute the same
log-probs of the same tokens.

Rows without images in a batch with some are fine (they add no pixel values). The
shared-prompt path of :mod:`trinity.trainer.actor` is for text rows: here every row runs
whole, its images through the vision tower.
"""

from __future__ import annotations

import torch

from trinity.models.multimodal import batch_media, media_forward_inputs
from trinity.trainer.batch import TrainBatch


def media_response_logits(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """(B, R, V) logits predicting each response token of ``batch``'s rows, images and all."""
    assert batch.media is not None
    inputs = media_forward_inputs(
        model, batch.input_ids, batch.attention_mask, batch_media(batch.media)
    )
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        logits_to_keep=batch.response_width + 1,
        use_cache=False,
        **inputs,
    )
    return out.logits[:, :-1, :]
