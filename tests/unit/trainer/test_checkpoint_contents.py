"""What a checkpoint holds (``actor.checkpoint.save_contents`` / ``load_contents``) and
which checkpoints stay (``max_critic_ckpt_to_keep``, ``remove_previous_ckpt_in_save``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_testing import changed, make_config, parameters, rollouts

from trinity.trainer import checkpoint as ckpt
from trinity.trainer.trainer import Trainer, TrainerSetupError


def contents(save: list[str], load: list[str] | None = None) -> dict:
    checkpoint: dict = {"save_contents": save}
    if load is not None:
        checkpoint["load_contents"] = load
    return {"trainer_config": {"actor_rollout_ref": {"actor": {"checkpoint": checkpoint}}}}


def test_hf_model_is_a_directory_from_pretrained_loads(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        trainer=contents(["model", "optimizer", "extra", "hf_model"]),
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    trainer.train_step(rollouts(8))  # weights that differ from the base model's
    actor = trainer.save_checkpoint(tmp_path / "job", 1)
    assert (actor / "model_world_size_1_rank_0.pt").exists()  # the shards stay beside it
    loaded = AutoModelForCausalLM.from_pretrained(actor / "huggingface", dtype=torch.float32)
    trained = trainer.model.state_dict()
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, trained[name]), name


def test_default_contents_write_no_hf_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = Trainer(
        make_config(tiny_model_dir, tmp_path), model_dir=tiny_model_dir, total_steps=2
    )
    actor = trainer.save_checkpoint(tmp_path / "job", 1)
    assert (actor / "huggingface" / "config.json").exists()
    assert not list((actor / "huggingface").glob("*.safetensors"))


def test_a_checkpoint_without_optimizer_resumes_with_load_contents_model(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = make_config(tiny_model_dir, tmp_path, trainer=contents(["model"]))
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=3)
    trainer.train_step(rollouts(8))
    actor = trainer.save_checkpoint(tmp_path / "job", 1)
    assert sorted(p.name for p in actor.glob("*.pt")) == ["model_world_size_1_rank_0.pt"]
    assert ckpt.read_latest(tmp_path / "job") == 1  # still the run's checkpoint to resume
    saved = parameters(trainer.model)

    with pytest.raises(TrainerSetupError, match="holds no optimizer state"):
        Trainer(cfg, model_dir=tiny_model_dir, total_steps=3).load_checkpoint(tmp_path / "job")
    weights_only = make_config(tiny_model_dir, tmp_path, trainer=contents(["model"], ["model"]))
    restored = Trainer(weights_only, model_dir=tiny_model_dir, total_steps=3)
    assert restored.load_checkpoint(tmp_path / "job") == 1
    assert not changed(saved, restored.model)
    assert not restored.optimizer.state  # a fresh optimizer


def test_max_critic_ckpt_to_keep_prunes_only_critics(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "ppo",
        trainer={"trainer_config": {"trainer": {"max_critic_ckpt_to_keep": 2}}},
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=3)
    job = tmp_path / "job"
    for step in (1, 2, 3):
        trainer.save_checkpoint(job, step)
    assert ckpt.list_steps(job) == [1, 2, 3]
    critics = [s for s in (1, 2, 3) if (ckpt.step_dir(job, s) / "critic").is_dir()]
    assert critics == [2, 3]
    assert not list(job.glob(".global_step_*"))  # nothing half-deleted left behind


def test_remove_previous_ckpt_in_save_keeps_the_newest(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "ppo",
        trainer={"trainer_config": {"trainer": {"remove_previous_ckpt_in_save": True}}},
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=3)
    job = tmp_path / "job"
    trainer.save_checkpoint(job, 1)
    trainer.save_state_dict(job, 2)  # a weights-only save for checkpoint sync is not counted
    trainer.save_checkpoint(job, 3, keep=5)  # wins over max_actor_ckpt_to_keep, as in veRL
    assert ckpt.list_steps(job) == [2, 3]
    assert (ckpt.step_dir(job, 3) / "critic").is_dir()


def test_resume_from_path_accepts_a_full_checkpoint_without_optimizer(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from trinity.config import ConfigError
    from trinity.config.lookups import RESUME_FROM_PATH, checkpoint_step

    cfg = make_config(tiny_model_dir, tmp_path, trainer=contents(["model"]))
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    job = tmp_path / "job"
    trainer.save_checkpoint(job, 1)
    trainer.save_state_dict(job, 2)  # weights for checkpoint sync only
    assert checkpoint_step(RESUME_FROM_PATH, str(ckpt.step_dir(job, 1)), job) == 1
    with pytest.raises(ConfigError, match="holds no full checkpoint"):
        checkpoint_step(RESUME_FROM_PATH, str(ckpt.step_dir(job, 2)), job)


def test_load_contents_hf_model_reads_the_policy_from_huggingface(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    save = ["model", "optimizer", "extra", "hf_model"]
    cfg = make_config(tiny_model_dir, tmp_path, trainer=contents(save))
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=3)
    trainer.train_step(rollouts(8))
    actor = trainer.save_checkpoint(tmp_path / "job", 1)
    trained = parameters(trainer.model)
    # the shards are gone: only huggingface/ can give the trained weights back
    (actor / "model_world_size_1_rank_0.pt").unlink()

    cfg = make_config(tiny_model_dir, tmp_path, trainer=contents(save, ["hf_model"]))
    resumed = Trainer(cfg, model_dir=tiny_model_dir, total_steps=3)
    assert changed(trained, resumed.model)  # the base model before loading
    assert resumed.load_checkpoint(tmp_path / "job") == 1
    assert changed(trained, resumed.model) == []  # the tied LM head included
    resumed.train_step(rollouts(8, seed=1))  # and it trains on from there


def test_load_contents_hf_model_needs_hf_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = Trainer(
        make_config(tiny_model_dir, tmp_path), model_dir=tiny_model_dir, total_steps=2
    )
    trainer.save_checkpoint(tmp_path / "job", 1)  # default save_contents: no hf_model
    for load, message in (
        (["hf_model"], "holds no weights"),
        (["model", "hf_model"], "lists both 'model' and 'hf_model'"),
    ):
        cfg = make_config(tiny_model_dir, tmp_path, trainer=contents(["model"], load))
        resumed = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
        with pytest.raises(TrainerSetupError, match=message):
            resumed.load_checkpoint(tmp_path / "job")
