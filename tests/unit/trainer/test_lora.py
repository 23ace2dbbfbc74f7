"""LoRA: the trainer updates only the adapter, checkpoints and syncs only the adapter, the
rollout engine applies it to its base weights, and the checkpoint converts to a merged model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_testing import grouped_rollouts, make_config, rollouts

from trinity.config import ConfigError
from trinity.rollout.engine import TransformersEngine
from trinity.trainer import checkpoint as ckpt
from trinity.trainer import lora
from trinity.trainer.convert import convert
from trinity.trainer.trainer import Trainer

LORA = {
    "lora_configs": [
        {"lora_rank": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]}
    ]
}
SEQS = [[5, 17, 300, 42, 9, 77, 12], [8, 1, 2, 3]]
PROMPTS = [3, 2]


def _lora_config(model_dir: Path, tmp_path: Path):
    return make_config(model_dir, tmp_path, model={"lora_configs": LORA["lora_configs"]})


def _logprobs(model: torch.nn.Module) -> list[torch.Tensor]:
    out = []
    with torch.no_grad():
        for seq, plen in zip(SEQS, PROMPTS, strict=True):
            logits = model(input_ids=torch.tensor([seq])).logits[0].float()
            logp = torch.log_softmax(logits[plen - 1 : -1], dim=-1)
            out.append(logp.gather(1, torch.tensor(seq[plen:])[:, None])[:, 0])
    return out


def _engine_logprobs(engine: TransformersEngine) -> list[torch.Tensor]:
    return [torch.tensor(v) for v in engine.compute_logprobs(SEQS, PROMPTS)]


def _close(a: list[torch.Tensor], b: list[torch.Tensor], atol: float = 1e-4) -> bool:
    return all(torch.allclose(x, y, atol=atol) for x, y in zip(a, b, strict=True))


def test_lora_trains_syncs_checkpoints_and_converts(tiny_model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    cfg = _lora_config(tiny_model_dir, tmp_path)
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    initial = _logprobs(trainer.model)

    for seed in range(2):
        metrics = trainer.train_step(rollouts(seed=seed))
        assert metrics["actor/grad_norm"] > 0
    after = trainer.model.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all(".lora_" in k for k in moved), moved
    assert any(".lora_B." in k for k in moved)  # B starts at zero: the policy changed
    trained = _logprobs(trainer.model)
    assert not _close(initial, trained)

    # sync: only the adapter travels; the engine merges it into its own base weights
    adapter = trainer.weights_for_sync()
    assert adapter and all(".lora_" in k for k in adapter)
    engine = TransformersEngine(str(tiny_model_dir), dtype="float32")
    try:
        assert _close(_engine_logprobs(engine), initial)
        applier = lora.AdapterApplier(
            engine.model.state_dict(), lora.config_scaling(cfg.model.lora_configs[0])
        )
        engine.load_state_dict(applier.full_state_dict(adapter), version=2)
        synced = _engine_logprobs(engine)
        assert engine.model_version == 2
        assert not _close(synced, initial)
        assert _close(synced, trained)
        # a second version merges onto the original base, not onto the first merge
        engine.load_state_dict(applier.full_state_dict(adapter), version=3)
        assert _close(_engine_logprobs(engine), trained)
    finally:
        engine.close()

    # the checkpoint holds the adapter only, plus the adapter in peft's format
    job = tmp_path / "job"
    actor = trainer.save_checkpoint(job, 2)
    saved = torch.load(actor / "model_world_size_1_rank_0.pt", weights_only=True)
    assert set(saved) == set(adapter)
    assert lora.is_adapter_checkpoint(actor)
    assert (actor / "huggingface" / "config.json").exists()

    # resuming restores the adapter exactly
    resumed = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    assert resumed.load_checkpoint(job) == 2
    assert _close(_logprobs(resumed.model), trained, atol=0)

    # convert writes one merged model that matches the adapter model
    [(hf_dir, status)] = convert(job)
    assert status == "converted"
    assert not (hf_dir / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    assert not any("lora" in k for k in merged.state_dict())
    assert _close(_logprobs(merged), trained)
    assert convert(job) == [(hf_dir, "skipped")]


def test_lora_starts_from_a_saved_adapter(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = _lora_config(tiny_model_dir, tmp_path)
    first = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    first.train_step(rollouts())
    actor = first.save_checkpoint(tmp_path / "job", 1)
    trained = _logprobs(first.model)

    cfg.model.lora_configs[0].path = str(actor / lora.ADAPTER_DIR)
    second = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    assert _close(_logprobs(second.model), trained)
    assert any(p.requires_grad for p in second.model.parameters())


def test_lora_config_errors(tiny_model_dir: Path, tmp_path: Path) -> None:
    two = [{"lora_rank": 4}, {"lora_rank": 8}]
    with pytest.raises(ConfigError, match="model.lora_configs"):
        make_config(tiny_model_dir, tmp_path, model={"lora_configs": two})
    with pytest.raises(ConfigError, match=r"model.lora_configs\[0\].lora_rank"):
        make_config(tiny_model_dir, tmp_path, model={"lora_configs": [{"lora_rank": 0}]})
    cfg = make_config(
        tiny_model_dir, tmp_path, model={"lora_configs": [{"target_modules": ["no_such_layer"]}]}
    )
    with pytest.raises(lora.LoRAError, match="target_modules"):
        Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    cfg = make_config(tiny_model_dir, tmp_path, model={"lora_configs": [{"path": str(tmp_path)}]})
    with pytest.raises(lora.LoRAError, match="adapter_config.json"):
        Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    assert ckpt.read_latest(tmp_path) is None


@pytest.mark.parametrize("packed", [True, False])
def test_lora_under_bf16_autocast_runs_shared_prompts(
    tiny_model_dir: Path, tmp_path: Path, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fp32 weights under bf16 autocast: the adapted projections' outputs need not share
    # the query's dtype; the packed and two-pass shared-prompt forwards both handle it
    from trinity.trainer import actor
    from trinity.trainer.batch import collate

    monkeypatch.setattr(actor, "PACK_SHARED_PROMPTS", packed)
    cfg = make_config(
        tiny_model_dir, tmp_path, model={"lora_configs": LORA["lora_configs"], "dtype": "bfloat16"}
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    assert trainer.autocast_dtype == torch.bfloat16
    batch = collate(grouped_rollouts(), trainer.pad_token_id)
    assert actor.shared_prompt_rows(batch) is not None
    logprobs, _ = actor.forward_logprobs(trainer.model, batch, compute_dtype=torch.bfloat16)
    full = trainer.model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
    ).logits  # fp32 weights, no autocast: the float32 answer
    labels = batch.input_ids[:, batch.prompt_width :]
    expected = full[:, batch.prompt_width - 1 : -1].float().log_softmax(-1)
    expected = expected.gather(-1, labels[..., None]).squeeze(-1)
    mask = batch.action_mask.bool()
    torch.testing.assert_close(logprobs[mask].detach(), expected[mask].detach(), atol=0.1, rtol=0)
    metrics = trainer.train_step(grouped_rollouts())
    assert metrics["actor/grad_norm"] > 0
