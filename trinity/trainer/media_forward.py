"""The actor's forward over a vision-language model's rows: the prompt images' pixel
values with the tokens, and the model's own position ids (3-D rotary positions for
Qwen-VL), the same inputs the rollout engine prefilled with, so both compute the same
log-probs of the same tokens.

Rows without images in a batch with some are fine (they add no pixel values). The
rollouts of one prompt share one ``MediaInputs`` object: the vision encoder runs once per
distinct object, and its features are handed to each of their rows
(``mm_encoder_outputs``, where the model takes them), so a group of ``repeat_times``
rollouts encodes its images once, forward and backward. The shared-prompt path of
:mod:`trinity.trainer.actor` is for text rows: the language model runs every row whole.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from trinity.rollout.multimodal import (
    MediaInputs,
    batch_media,
    inner_module,
    media_forward_inputs,
)
from trinity.trainer.batch import TrainBatch

# the image inputs get_image_features takes, by layout (Qwen-VL; Idefics3 / SmolVLM)
_IMAGE_KEYS = ("pixel_values", "image_grid_thw", "pixel_attention_mask")


def media_response_logits(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """(B, R, V) logits predicting each response token of ``batch``'s rows, images and all."""
    assert batch.media is not None
    inputs = media_forward_inputs(
        model, batch.input_ids, batch.attention_mask, batch_media(batch.media)
    )
    shared = shared_image_features(model, batch)
    if shared is not None:
        inputs = {"position_ids": inputs["position_ids"], "mm_encoder_outputs": {"image": shared}}
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        logits_to_keep=batch.response_width + 1,
        use_cache=False,
        **inputs,
    )
    return out.logits[:, :-1, :]


def shared_image_features(model: torch.nn.Module, batch: TrainBatch) -> Any | None:
    """The image features of ``batch``'s rows, each distinct ``MediaInputs`` encoded once,
    as the model's ``mm_encoder_outputs["image"]``; None where the model takes no
    precomputed features, a row has videos, or no two rows share their images."""
    assert batch.media is not None
    encoder = _image_encoder(model)
    if encoder is None or not _takes_encoder_outputs(model):
        return None
    distinct: dict[int, MediaInputs] = {}
    for media in batch.media:
        if media is not None:
            if set(media.tensors) - set(_IMAGE_KEYS):
                return None  # videos (or an input of another kind): the plain path
            distinct.setdefault(id(media), media)
    rows_with_media = sum(m is not None for m in batch.media)
    if len(distinct) == rows_with_media:
        return None  # nothing shared: the model's own path does the same work
    device = batch.input_ids.device
    tensors = {k: v.to(device) for k, v in batch_media(list(distinct.values())).items()}
    encoded = encoder.get_image_features(**tensors, return_dict=True)
    features = torch.cat(list(encoded.pooler_output), dim=0)
    # each distinct object's slice: as many feature rows as its prompt has image tokens
    image_token = int(encoder.config.image_token_id)
    counts = {
        id(m): int((batch.input_ids[i] == image_token).sum())
        for i, m in enumerate(batch.media)
        if m is not None
    }
    slices, start = {}, 0
    for key in distinct:
        slices[key] = features[start : start + counts[key]]
        start += counts[key]
    if start != features.shape[0]:
        return None  # the image tokens do not match the features: let the model say so
    rows = [slices[id(m)] for m in batch.media if m is not None]
    # in the form the model's own encoder gave: a list per image (transformers 5.2x) or
    # one tensor, scattered into the image tokens in order (earlier releases)
    tensor = isinstance(encoded.pooler_output, torch.Tensor)
    encoded.pooler_output = torch.cat(rows, dim=0) if tensor else rows
    return encoded


def _image_encoder(model: Any) -> Any | None:
    """The module of ``model`` that encodes images (``get_image_features``) and knows
    the image token: the base model under a peft wrapper and the generation head."""

    def encodes(m: Any) -> bool:
        return (
            callable(getattr(m, "get_image_features", None))
            and hasattr(getattr(m, "config", None), "image_token_id")
            and "ForConditionalGeneration" not in type(m).__name__
        )

    return inner_module(model, encodes)


def _takes_encoder_outputs(model: Any) -> bool:
    forward = getattr(model, "forward", None)
    try:
        return "mm_encoder_outputs" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False
