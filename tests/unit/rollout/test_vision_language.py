"""Vision-language models end to end in one process: the engine renders chat messages
with images through the model's processor and samples from them, the experiences carry
the images' model inputs (shared by a prompt's rollouts), and the trainer's forward over
the collated batch computes the engine's log-probs of the same tokens.

Two families: a tiny Qwen2.5-VL (concatenated patches, 3-D rotary positions) and a tiny
Idefics3 (SmolVLM's shape: stacked images, a Llama text side).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from vlm_testing import png_data_url, squares_image

from trinity.rollout.media import MediaError, load_image
from trinity.rollout.multimodal import is_vision_language
from trinity.rollout.vision_engine import VisionEngine, rollout_engine
from trinity.rollout.wrapper import ModelWrapper
from trinity.trainer.actor import forward_logprobs
from trinity.trainer.batch import collate
from trinity.trainer.model_setup import freeze_vision, load_policy


@pytest.fixture(scope="module", params=["qwen2_5_vl", "idefics3"])
def vlm_dir(request: pytest.FixtureRequest) -> Path:
    name = {"qwen2_5_vl": "tiny_qwen_vl_dir", "idefics3": "tiny_idefics3_dir"}[request.param]
    return request.getfixturevalue(name)


@pytest.fixture(scope="module")
def engine(vlm_dir: Path):
    with rollout_engine(model_path=str(vlm_dir), dtype="float32", seed=0) as built:
        yield built


def _question(count: int) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": squares_image(count)},
                {"type": "text", "text": "How many squares?"},
            ],
        }
    ]


def test_a_vision_language_directory_gets_the_vision_engine(engine, tiny_model_dir: Path) -> None:
    assert isinstance(engine, VisionEngine)
    assert engine.decode_path == "transformers-vision"
    assert not is_vision_language(tiny_model_dir)


def test_rollouts_of_an_image_prompt_share_its_pixel_values(engine) -> None:
    model = ModelWrapper(engine, max_response_tokens=6)
    exps = model.chat(_question(3), n=3, temperature=1.0, seed=1)
    assert len(exps) == 3
    media = exps[0].media
    assert media is not None and all(e.media is media for e in exps)
    assert "pixel_values" in media.tensors
    # the prompt holds the image's tokens, expanded by the processor
    image_token = engine.model.config.image_token_id
    assert int((exps[0].tokens[: exps[0].prompt_length] == image_token).sum()) == 4
    # the stored messages keep a viewable reference, not the PIL image
    part = exps[0].messages[0]["content"][0]
    assert part["type"] == "image" and part["image"].startswith("data:image/png;base64,")


def test_the_image_changes_what_the_model_computes(engine) -> None:
    model = ModelWrapper(engine, max_response_tokens=4)
    [a] = model.chat(_question(1), temperature=0.0)
    [b] = model.chat(_question(5), temperature=0.0)
    assert a.tokens[: a.prompt_length].tolist() == b.tokens[: b.prompt_length].tolist()
    assert not torch.equal(a.logprobs, b.logprobs)


def test_image_and_text_prompts_decode_in_one_batch(engine) -> None:
    model = ModelWrapper(engine, max_response_tokens=4)
    alone = model.chat(_question(2), temperature=0.0)[0]
    text = model.chat([{"role": "user", "content": "hello"}], temperature=0.0)[0]
    assert text.media is None
    prompt = engine.render_media(_question(2))
    from trinity.rollout.sampling import SamplingParams

    together = engine.generate(
        [prompt.ids, text.tokens[: text.prompt_length].tolist()],
        SamplingParams(max_tokens=4, temperature=0.0),
        media=[prompt.media, None],
    )
    assert together[0][0].token_ids == alone.response_tokens.tolist()
    assert together[1][0].token_ids == text.response_tokens.tolist()


def test_trainer_logprobs_match_the_rollout_engines(engine, vlm_dir: Path) -> None:
    """Rollout/trainer parity: the same weights (float32), the same tokens and images."""
    model = ModelWrapper(engine, max_response_tokens=6)
    exps = model.chat(_question(3), n=2, temperature=1.0, seed=3)
    exps += model.chat(_question(6), n=1, temperature=1.0, seed=4)
    exps += model.chat([{"role": "user", "content": "no image here"}], n=1, seed=5)
    for i, exp in enumerate(exps):
        exp.eid.task = i
    policy = load_policy(vlm_dir, {}, gradient_checkpointing=False, lora_config=None)
    policy.eval()
    batch = collate(exps, engine.pad_token_id)
    with torch.no_grad():
        logprobs, _ = forward_logprobs(policy, batch)
    for i, exp in enumerate(exps):
        r = exp.response_length
        torch.testing.assert_close(logprobs[i, :r], exp.logprobs, atol=2e-4, rtol=0)
    # micro-batches keep each row's images
    halves = batch.split(2)
    with torch.no_grad():
        parts = [forward_logprobs(policy, half)[0] for half in halves]
    torch.testing.assert_close(torch.cat(parts), logprobs, atol=2e-5, rtol=0)


def test_freezing_the_vision_tower_leaves_the_language_side_trainable(vlm_dir: Path) -> None:
    policy = load_policy(
        vlm_dir, {}, gradient_checkpointing=False, lora_config=None, freeze_vision_tower=True
    )
    frozen = {n for n, p in policy.named_parameters() if not p.requires_grad}
    assert frozen and all(
        any(part in n.split(".") for part in ("visual", "vision_model", "connector"))
        for n in frozen
    )
    assert freeze_vision(policy) == sum(
        p.numel() for n, p in policy.named_parameters() if n in frozen
    )
    assert any(p.requires_grad for n, p in policy.named_parameters() if "embed_tokens" in n)


def test_lora_adapts_the_language_side_only(vlm_dir: Path) -> None:
    from trinity.config.schema.model import LoRAConfig

    policy = load_policy(
        vlm_dir,
        {},
        gradient_checkpointing=False,
        lora_config=LoRAConfig(lora_rank=2, lora_alpha=4, target_modules=["all-linear"]),
    )
    adapted = [n for n, _ in policy.named_parameters() if "lora_A" in n]
    assert adapted
    assert not [n for n in adapted if "visual" in n.split(".") or "vision_model" in n.split(".")]


def test_images_load_from_paths_urls_and_bytes(tmp_path: Path) -> None:
    image = squares_image(2)
    path = tmp_path / "two.png"
    image.save(path)
    for value in (str(path), f"file://{path}", png_data_url(image), path.read_bytes()):
        assert load_image(value, "row 0").size == (56, 56)
    assert load_image({"bytes": path.read_bytes(), "path": None}, "row 0").mode == "RGB"
    with pytest.raises(MediaError, match=r"row 7, key 'images'.*does not exist"):
        load_image(str(tmp_path / "missing.png"), "row 7, key 'images'")
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(MediaError, match="not a readable image"):
        load_image(str(tmp_path / "bad.png"), "row 1")
    with pytest.raises(MediaError, match="remote URL"):
        load_image("https://example.com/cat.png", "row 2")


def test_the_engine_scores_responses_with_their_images(engine) -> None:
    """``response_logprobs`` (a teacher's view of a rollout) sees the rollout's images."""
    model = ModelWrapper(engine, max_response_tokens=5)
    exps = model.chat(_question(4), n=2, temperature=1.0, seed=7)
    for exp, scored in zip(exps, model.response_logprobs(exps), strict=True):
        torch.testing.assert_close(scored, exp.logprobs, atol=2e-4, rtol=0)


def test_a_processor_named_beside_its_image_processor_loads(tiny_qwen_vl_dir: Path, tmp_path):
    """Older model directories (Qwen2.5-VL's hub snapshots) name the processor class in
    preprocessor_config.json; without torchvision it loads for images only."""
    import json
    import shutil

    from trinity.rollout.multimodal import load_processor

    old = tmp_path / "qwen"
    shutil.copytree(tiny_qwen_vl_dir, old)
    settings = json.loads((old / "processor_config.json").read_text())
    image_settings = {**settings.pop("image_processor"), "processor_class": "Qwen2_5_VLProcessor"}
    (old / "preprocessor_config.json").write_text(json.dumps(image_settings))
    (old / "processor_config.json").unlink()
    processor = load_processor(old)
    assert type(processor).__name__ == "Qwen2_5_VLProcessor"
    assert processor.image_processor.merge_size == 2


def test_a_groups_images_are_encoded_once_with_the_same_gradients(engine, vlm_dir: Path) -> None:
    """The trainer encodes each prompt's images once for all its rollouts; the loss and
    its gradients are those of encoding them row by row."""
    from trinity.trainer import media_forward

    model = ModelWrapper(engine, max_response_tokens=4)
    exps = model.chat(_question(2), n=3, seed=1) + model.chat(_question(5), n=2, seed=2)
    for i, exp in enumerate(exps):
        exp.eid.task = i
    policy = load_policy(vlm_dir, {}, gradient_checkpointing=False, lora_config=None)
    batch = collate(exps, engine.pad_token_id)
    shared = media_forward.shared_image_features(policy, batch)
    assert shared is not None
    rows, image_tokens = shared.pooler_output, int((batch.input_ids == _image_token(policy)).sum())
    if isinstance(rows, list):  # one entry per row with images (transformers 5.2x)
        assert len(rows) == 5 and sum(r.shape[0] for r in rows) == image_tokens
    else:  # one tensor, scattered into the image tokens in order (earlier releases)
        assert rows.shape[0] == image_tokens

    def loss_and_grads(share: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        policy.zero_grad()
        original = media_forward.shared_image_features
        if not share:
            media_forward.shared_image_features = lambda *args: None
        try:
            logprobs, _ = forward_logprobs(policy, batch)
        finally:
            media_forward.shared_image_features = original
        loss = -(logprobs * batch.action_mask).sum()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in policy.named_parameters()}

    shared_loss, shared_grads = loss_and_grads(True)
    plain_loss, plain_grads = loss_and_grads(False)
    torch.testing.assert_close(shared_loss, plain_loss)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=1e-4, rtol=1e-4, msg=name)


def test_prompts_with_different_numbers_of_images_batch_together(engine, vlm_dir: Path) -> None:
    """Two images in one prompt, one in the other: the batch pads (Idefics3) or
    concatenates (Qwen-VL) them, in the engine as in the trainer."""
    two = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": squares_image(1)},
                {"type": "image", "image": squares_image(4, color="blue")},
                {"type": "text", "text": "Which has more?"},
            ],
        }
    ]
    model = ModelWrapper(engine, max_response_tokens=4)
    exps = model.chat(two, n=2, temperature=1.0, seed=5) + model.chat(_question(2), seed=6)
    for i, exp in enumerate(exps):
        exp.eid.task = i
    image_token = engine.model.config.image_token_id
    assert int((exps[0].tokens[: exps[0].prompt_length] == image_token).sum()) == 8
    policy = load_policy(vlm_dir, {}, gradient_checkpointing=False, lora_config=None)
    with torch.no_grad():
        logprobs, _ = forward_logprobs(policy, collate(exps, engine.pad_token_id))
    for i, exp in enumerate(exps):
        torch.testing.assert_close(
            logprobs[i, : exp.response_length], exp.logprobs, atol=2e-4, rtol=0
        )


def _image_token(model) -> int:
    config = model.config
    return int(getattr(config, "image_token_id", None) or config.text_config.image_token_id)
