"""Tiny random vision-language models for tests: a Qwen2.5-VL-shaped and an
Idefics3/SmolVLM-shaped one, each with its real image processor (the PIL backend) and
the SmolLM2 tokenizer extended with the image tokens. Nothing is downloaded.

    qwen_dir = build_tiny_qwen2_5_vl(smollm2_dir, tmp_path / "qwen")
    idefics_dir = build_tiny_idefics3(smollm2_dir, tmp_path / "idefics3")
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import torch

from trinity.rollout.multimodal import images_only_class

# ChatML, as SmolLM2's; a list content renders its text parts and, for each image part,
# the image placeholder of the processor (which expands it into the image's tokens)
_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}IMAGE_PLACEHOLDER"
    "{% elif part['type'] == 'video' %}VIDEO_PLACEHOLDER"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chat_template(image: str, video: str = "") -> str:
    return _TEMPLATE.replace("IMAGE_PLACEHOLDER", image).replace("VIDEO_PLACEHOLDER", video)


def _has_torchvision() -> bool:
    import importlib.util

    return importlib.util.find_spec("torchvision") is not None


def _tokenizer(smollm2_dir: Path, tokens: list[str], template: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": tokens})
    tokenizer.chat_template = template
    return tokenizer


def _save(model, processor, generation_config, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = generation_config
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    return out


def _generation_config(tokenizer):
    from transformers import GenerationConfig

    return GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_tiny_qwen2_5_vl(smollm2_dir: Path, out: Path) -> Path:
    """A 2-layer Qwen2.5-VL (text hidden 64, vision hidden 32, depth 2) in ``out``.

    Its image processor takes images of 56x56 pixels and more to 4 x 4 patches of 14
    pixels, merged 2 x 2: a 56x56 image is 4 image tokens."""
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessorPil,
    )

    tokens = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    template = chat_template("<|vision_start|><|image_pad|><|vision_end|>")
    tokenizer = _tokenizer(smollm2_dir, tokens, template)
    ids = tokenizer.convert_tokens_to_ids(tokens)
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 3, 3],
            },
            "initializer_range": 0.2,
            "tie_word_embeddings": True,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
        },
        vision_start_token_id=ids[0],
        vision_end_token_id=ids[1],
        image_token_id=ids[2],
        video_token_id=ids[3],
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32)
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=56 * 56, max_pixels=64 * 64, patch_size=14, merge_size=2, temporal_patch_size=2
    )
    # without torchvision there is no video processor: the processor takes images only
    processor_class = (
        Qwen2_5_VLProcessor if _has_torchvision() else images_only_class(Qwen2_5_VLProcessor)
    )
    processor = processor_class(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=template
    )
    return _save(model, processor, _generation_config(tokenizer), out)


def build_tiny_idefics3(smollm2_dir: Path, out: Path) -> Path:
    """A 2-layer Idefics3 (SmolVLM's shape: a Llama text side as SmolLM2's) in ``out``:
    images are resized to 64x64 and not split, each one 4 image tokens (pixel shuffle 2
    over 4 x 4 patches of 16 pixels)."""
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
    )

    tokens = ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]
    tokens += [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    template = chat_template("<image>")
    tokenizer = _tokenizer(smollm2_dir, tokens, template)
    config = Idefics3Config(
        text_config={
            "model_type": "llama",
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "initializer_range": 0.2,
            "tie_word_embeddings": True,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 64,
            "patch_size": 16,
        },
        scale_factor=2,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(config).to(torch.float32)
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": 64},
        max_image_size={"longest_edge": 64},
    )
    processor = Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=4,
        chat_template=template,
    )
    return _save(model, processor, _generation_config(tokenizer), out)


def squares_image(count: int, size: int = 56, color: str = "red"):
    """A white ``size`` x ``size`` PIL image with ``count`` filled squares in a row."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (size, size), "white")
    draw = ImageDraw.Draw(image)
    side = size // 8
    for i in range(count):
        x = 2 + i * (side + 2)
        draw.rectangle([x, size // 2, x + side, size // 2 + side], fill=color)
    return image


def png_data_url(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
