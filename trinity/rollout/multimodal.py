"""Vision-language models: loading one with its processor, chat prompts with images, and
the model inputs (pixel values, grids, position ids) of a batch of such prompts.

Any transformers image-text-to-text model whose directory holds a processor works
(``AutoProcessor`` + ``AutoModelForImageTextToText``). Two input layouts are batched:

- Qwen2-VL / Qwen2.5-VL: ``pixel_values`` are patch rows of every image one after the
  other and ``image_grid_thw`` one row per image, so a batch concatenates them; the text
  model takes 3-D rotary positions (``get_rope_index``: temporal, height, width);
- Idefics3 / SmolVLM (and the like): ``pixel_values`` (1, images, C, H, W) per prompt, so
  a batch pads the image axis with all-zero images (which the model skips) and stacks.

The processor's tensors of one prompt are a :class:`MediaInputs`; the ``n`` rollouts of a
prompt share that one object (the pixel values are never copied per rollout).

    processor = load_processor(model_dir)
    prompt = render_media_chat(processor, messages)  # messages with {"type": "image"} parts
    prompt.ids, prompt.media.tensors["pixel_values"]
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trinity.rollout.media_messages import split_media

# keys of a processor's output that are not model inputs of the images (the ids are the
# prompt's; the mask and token types are rebuilt for every batch)
_TEXT_KEYS = {"input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids"}
# keys of the concatenated layout: one entry per image / video patch, not per prompt
_GRID_KEYS = {"image_grid_thw", "video_grid_thw"}


@dataclass(eq=False)
class MediaInputs:
    """The processor's image (and video) tensors of one prompt, as the model takes them
    (e.g. ``pixel_values`` and ``image_grid_thw``), and a digest of their contents."""

    tensors: dict[str, torch.Tensor]
    digest: str = field(default="")

    def __post_init__(self) -> None:
        if not self.digest:
            self.digest = media_digest(self.tensors)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def media_digest(tensors: dict[str, torch.Tensor]) -> str:
    """A content hash of ``tensors`` (names, dtypes, shapes and values)."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(json.dumps([name, str(t.dtype), list(t.shape)]).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:32]


@dataclass
class MediaPrompt:
    """A chat prompt rendered for a vision-language model."""

    ids: list[int]
    media: MediaInputs | None  # None: the messages hold no image


def is_vision_language(path: str | Path) -> bool:
    """Whether the model in ``path`` is an image-text-to-text model (its ``config.json``
    names a vision config or an architecture of that kind)."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        return False
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError):
        return False
    if "vision_config" in config:
        return True
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    kind = config.get("model_type")
    return kind in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES and (
        kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    )


def model_class(path: str | Path) -> Any:
    """The transformers auto class that loads the policy in ``path``."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if is_vision_language(path) else AutoModelForCausalLM


def config_model_class(config: Any) -> Any:
    """The transformers auto class for a model built from ``config`` (a ``PretrainedConfig``)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    vision = getattr(config, "vision_config", None) is not None
    return AutoModelForImageTextToText if vision else AutoModelForCausalLM


# files of a vision-language model's processor, copied into exported model directories
PROCESSOR_FILES = (
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
    "chat_template.json",
    "chat_template.jinja",
)


def copy_processor_files(source: str | Path, target: str | Path) -> list[str]:
    """Copy the processor files of the model in ``source`` into ``target`` (the ones it
    has); returns their names."""
    import shutil

    copied = []
    for name in PROCESSOR_FILES:
        if (Path(source) / name).is_file():
            shutil.copyfile(Path(source) / name, Path(target) / name)
            copied.append(name)
    return copied


def load_processor(path: str | Path, chat_template: str | None = None) -> Any:
    """The processor in ``path``. Where a processor needs a video processor that this
    machine cannot build (no torchvision), it is loaded for images only: videos then
    fail when given, in one line."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(path)
    except (ImportError, OSError, ValueError, TypeError, AttributeError) as exc:
        processor = _images_only(path, exc)
    if chat_template:
        processor.chat_template = chat_template
        processor.tokenizer.chat_template = chat_template
    return processor


def _images_only(path: str | Path, error: Exception) -> Any:
    import transformers

    # newer directories name the class in processor_config.json, older ones beside the
    # image processor's or the tokenizer's settings
    names = ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json")
    for name in names:
        try:
            config = json.loads((Path(path) / name).read_text())
            cls = getattr(transformers, str(config.get("processor_class")))
        except (OSError, ValueError, AttributeError):
            continue
        if "video_processor" in inspect.signature(cls.__init__).parameters:
            return images_only_class(cls).from_pretrained(path)
    raise error


def images_only_class(cls: type) -> type:
    """``cls`` (a processor class taking a ``video_processor``) without its video
    processor, under the same name (so it saves and loads as ``cls``)."""

    class ImagesOnly(cls):  # type: ignore[misc, valid-type]
        # transformers lists a processor's parts from its __init__'s parameters
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            super().__init__(
                image_processor, tokenizer, None, chat_template=chat_template, **kwargs
            )

    ImagesOnly.__name__ = ImagesOnly.__qualname__ = cls.__name__
    return ImagesOnly


def render_media_chat(
    processor: Any,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool = True,
    **template_args: Any,
) -> MediaPrompt:
    """Token ids of ``messages`` (images expanded into their image tokens by the
    processor) and the images' model inputs."""
    plain, images, videos = split_media(messages)
    text = processor.apply_chat_template(
        plain, tokenize=False, add_generation_prompt=add_generation_prompt, **template_args
    )
    if videos and getattr(processor, "video_processor", None) is None:
        raise ValueError(
            f"{type(processor).__name__} has no video processor here (it needs torchvision); "
            "install torchvision or give images"
        )
    kwargs: dict[str, Any] = {"text": [text], "return_tensors": "pt"}
    if images:
        kwargs["images"] = [images]
    if videos:
        kwargs["videos"] = [videos]
    # the template already writes the special tokens it wants
    out = processor(text_kwargs={"add_special_tokens": False}, **kwargs)
    ids = out["input_ids"][0].tolist()
    tensors = {k: v for k, v in out.items() if k not in _TEXT_KEYS and isinstance(v, torch.Tensor)}
    return MediaPrompt(ids, MediaInputs(tensors) if tensors else None)


def batch_media(rows: list[MediaInputs | None]) -> dict[str, torch.Tensor]:
    """The model inputs of a batch whose rows carry ``rows``' media (None: no image)."""
    present = [r for r in rows if r is not None]
    if not present:
        return {}
    keys = sorted({k for r in present for k in r.tensors})
    if _GRID_KEYS & set(keys):
        # Qwen-VL layout: patches and grids of every image, row after row
        return {k: torch.cat([r.tensors[k] for r in present if k in r.tensors]) for k in keys}
    return {k: _stack_padded([None if r is None else r.tensors.get(k) for r in rows]) for k in keys}


def _stack_padded(tensors: list[torch.Tensor | None]) -> torch.Tensor:
    """(1, N_i, ...) per row -> (B, max N_i, ...), padded with zeros (all-zero images,
    which Idefics3-style models drop; False in a pixel mask)."""
    like = next(t for t in tensors if t is not None)
    width = max(t.shape[1] for t in tensors if t is not None)
    out = like.new_zeros((len(tensors), width, *like.shape[2:]))
    for i, t in enumerate(tensors):
        if t is not None:
            out[i, : t.shape[1]] = t[0]
    return out


def inner_module(model: Any, wanted: Callable[[Any], bool]) -> Any | None:
    """The first of ``model`` and the models it wraps (a peft wrapper, the
    conditional-generation model, its base model) for which ``wanted`` holds."""
    seen = model
    for _ in range(4):
        if wanted(seen):
            return seen
        nxt = getattr(seen, "base_model", None) or getattr(seen, "model", None)
        if nxt is None or nxt is seen:
            return None
        seen = nxt
    return None


def rope_model(model: Any) -> Any | None:
    """The module of ``model`` with ``get_rope_index`` (multimodal rotary positions), if any."""
    return inner_module(model, lambda m: callable(getattr(m, "get_rope_index", None)))


# module names of the vision side in transformers' image-text-to-text models (Qwen-VL's
# "visual", Idefics3/SmolVLM's "vision_model" and "connector", LLaVA's "vision_tower" and
# "multi_modal_projector")
VISION_MODULES = ("visual", "vision_model", "vision_tower", "connector", "multi_modal_projector")


def vision_parameters(model: Any) -> list[tuple[str, Any]]:
    """(name, parameter) of the vision encoder and projector of ``model``."""
    return [
        (name, param)
        for name, param in model.named_parameters()
        if any(part in VISION_MODULES for part in name.split("."))
    ]


def token_types(config: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """(B, L) int: 1 at image tokens, 2 at video tokens, 0 elsewhere."""
    types = torch.zeros_like(input_ids, dtype=torch.int)
    for value, name in ((1, "image_token_id"), (2, "video_token_id")):
        token = getattr(config, name, None)
        if token is not None:
            types[input_ids == int(token)] = value
    return types


def media_positions(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    media: dict[str, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Position ids of left-padded rows with their media, and each row's offset for the
    tokens that follow: ((3, B, L), (B,)) for models with multimodal rotary positions
    (Qwen-VL), else ((B, L) counting real tokens, zeros)."""
    plain = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    rope = rope_model(model)
    grids = {k: media[k] for k in ("image_grid_thw", "video_grid_thw") if k in media}
    if rope is None:
        return plain, torch.zeros(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
    positions, deltas = rope.get_rope_index(
        input_ids,
        mm_token_type_ids=token_types(rope.config, input_ids),
        image_grid_thw=grids.get("image_grid_thw"),
        video_grid_thw=grids.get("video_grid_thw"),
        second_per_grid_ts=media.get("second_per_grid_ts"),
        attention_mask=attention_mask,
    )
    return positions, deltas.reshape(-1).to(input_ids.device)


def media_forward_inputs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    media: dict[str, torch.Tensor],
) -> dict[str, Any]:
    """Keyword arguments of a forward pass over left-padded rows with their media: the
    media tensors (on the ids' device) and the position ids."""
    device = input_ids.device
    tensors = {k: v.to(device) for k, v in media.items()}
    positions, _ = media_positions(model, input_ids, attention_mask, tensors)
    return {**tensors, "position_ids": positions}
