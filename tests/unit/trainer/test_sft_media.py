"""SFT rows with images for a vision-language policy: the images go into the prompt
(expanded by the processor), the reply is what is trained on, and the experience
carries the images' model inputs into the trainer's forward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from vlm_testing import png_data_url, squares_image

from trinity.config.schema import FormatConfig, StorageConfig
from trinity.rollout.multimodal import load_processor
from trinity.trainer.actor import forward_logprobs
from trinity.trainer.batch import collate
from trinity.trainer.model_setup import load_policy
from trinity.trainer.sft_data import DatasetSource


def _dataset(tmp_path: Path, rows: list[dict]) -> StorageConfig:
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fmt = FormatConfig(prompt_key="problem", response_key="response", image_key="images")
    return StorageConfig(name="geometry_sft", storage_type="file", path=str(tmp_path), format=fmt)


def test_sft_rows_with_images_train_on_the_reply(tiny_idefics3_dir: Path, tmp_path: Path) -> None:
    processor = load_processor(tiny_idefics3_dir)
    image = png_data_url(squares_image(2))
    rows = [
        {"problem": "How many squares?", "response": "Two.", "images": [image]},
        {"problem": "And here?", "response": "None.", "images": []},
    ]
    source = DatasetSource(
        _dataset(tmp_path, rows), processor.tokenizer, kind="sft", batch_size=2, processor=processor
    )
    with_image, text_only = source.get(2)
    assert with_image.media is not None and text_only.media is None
    image_token = processor.tokenizer.convert_tokens_to_ids("<image>")
    prompt = with_image.tokens[: with_image.prompt_length]
    assert int((prompt == image_token).sum()) == 4
    reply = processor.tokenizer.decode(with_image.response_tokens)
    assert reply.startswith("Two.") and bool(with_image.action_mask.all())
    # the stored messages keep a thumbnail of the image
    assert with_image.messages[0]["content"][0]["image"].startswith("data:image/png")

    policy = load_policy(tiny_idefics3_dir, {}, gradient_checkpointing=False, lora_config=None)
    with_image.eid.task, text_only.eid.task = 0, 1
    batch = collate([with_image, text_only], processor.tokenizer.pad_token_id)
    logprobs, _ = forward_logprobs(policy, batch)
    assert torch.isfinite(logprobs).all()
    (-(logprobs * batch.action_mask).sum()).backward()
    connector = [p for n, p in policy.named_parameters() if ".connector." in n]
    assert connector and any(p.grad is not None and p.grad.abs().sum() > 0 for p in connector)


def test_an_sft_row_whose_image_is_missing_names_dataset_row_and_key(
    tiny_idefics3_dir: Path, tmp_path: Path
) -> None:
    processor = load_processor(tiny_idefics3_dir)
    rows = [{"problem": "?", "response": "!", "images": ["/gone.png"]}]
    source = DatasetSource(
        _dataset(tmp_path, rows), processor.tokenizer, kind="sft", batch_size=1, processor=processor
    )
    with pytest.raises(ValueError, match=r"dataset 'geometry_sft', row 0, key 'images'"):
        source.get(1)
