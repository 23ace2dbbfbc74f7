"""Weights-only saves (``sync_method: checkpoint``) beside full checkpoints: a publish of
a step never costs that step's full checkpoint its optimizer or extra state, and the
weights-only directories no pointer names are deleted, so a run keeps a bounded number
of model copies however often it synchronises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from trainer_testing import changed, make_config, parameters, rollouts

from trinity.sync import weights
from trinity.trainer import checkpoint as ckpt
from trinity.trainer.trainer import Trainer

# a file another part of the run keeps in a step directory (e.g. read positions)
OTHER_FILE = "other_state.json"


def keep(n: int) -> dict:
    return {"trainer_config": {"trainer": {"max_actor_ckpt_to_keep": n}}}


def model_copies(job: Path) -> int:
    return len(list(job.glob("global_step_*/actor/model_world_size_*_rank_*.pt")))


@pytest.fixture
def trainer(tiny_model_dir: Path, tmp_path: Path) -> Trainer:
    cfg = make_config(tiny_model_dir, tmp_path, trainer=keep(1))
    trained = Trainer(cfg, model_dir=tiny_model_dir, total_steps=12)
    trained.train_step(rollouts(8))  # weights and AdamW moments that differ from a fresh start
    return trained


def test_a_publish_after_the_full_save_of_its_step_keeps_the_checkpoint(
    trainer: Trainer, tmp_path: Path
) -> None:
    job = tmp_path / "job"
    actor = trainer.save_checkpoint(job, 1)
    (actor.parent / OTHER_FILE).write_text('{"position": 8}')
    files = {p.name: p.stat().st_ino for p in actor.iterdir()}
    assert {"optim_world_size_1_rank_0.pt", "extra_state_world_size_1_rank_0.pt"} <= files.keys()

    trainer.save_state_dict(job, 1)  # explorer_driven: the explorer asked after the save

    assert {p.name: p.stat().st_ino for p in actor.iterdir()} == files  # nothing rewritten
    assert (actor.parent / OTHER_FILE).read_text() == '{"position": 8}'
    assert ckpt.read_latest(job, ckpt.LATEST_STATE_DICT) == 1
    assert ckpt.read_latest(job) == 1
    # the explorer reads version 1 from the full checkpoint
    assert weights.read_version(job, 1)[0] == 1
    restored = Trainer(trainer.config, model_dir=trainer.model_dir, total_steps=12)
    assert restored.load_checkpoint(job) == 1  # the default load_contents needs the optimizer
    assert not changed(parameters(trainer.model), restored.model)
    moments = [s["exp_avg"] for s in restored.optimizer.state.values()]
    assert moments and all(
        torch.equal(m, s["exp_avg"])
        for m, s in zip(moments, trainer.optimizer.state.values(), strict=True)
    )


def test_a_full_save_after_a_publish_of_its_step_is_a_full_checkpoint(
    trainer: Trainer, tmp_path: Path
) -> None:
    job = tmp_path / "job"
    trainer.save_state_dict(job, 1)
    (ckpt.step_dir(job, 1) / OTHER_FILE).write_text("{}")
    actor = trainer.save_checkpoint(job, 1)
    assert json.loads((actor / "fsdp_config.json").read_text())["full"] is True
    assert (actor / "optim_world_size_1_rank_0.pt").exists()
    assert (actor.parent / OTHER_FILE).read_text() == "{}"
    restored = Trainer(trainer.config, model_dir=trainer.model_dir, total_steps=12)
    assert restored.load_checkpoint(job) == 1
    assert restored.optimizer.state


def test_weights_only_saves_no_pointer_names_are_deleted(trainer: Trainer, tmp_path: Path) -> None:
    job = tmp_path / "job"
    for step in range(1, 11):
        trainer.save_state_dict(job, step)
        assert ckpt.list_steps(job) == [step]  # the newest publish only
    assert model_copies(job) == 1
    assert weights.latest_on_disk(job) == 10
    assert not list(job.glob(".global_step_*"))  # nothing half-deleted left behind


def test_publishes_and_full_saves_keep_a_bounded_number_of_copies(
    trainer: Trainer, tmp_path: Path
) -> None:
    """Sync every step, save every 4th, max_actor_ckpt_to_keep 1: at most the kept full
    checkpoint and the newest publish remain."""
    job = tmp_path / "job"
    for step in range(1, 11):
        trainer.save_state_dict(job, step)
        if step % 4 == 0:
            trainer.save_checkpoint(job, step, keep=1)
        assert model_copies(job) <= 2, ckpt.list_steps(job)
    assert ckpt.list_steps(job) == [8, 10]
    assert ckpt.read_latest(job) == 8 and ckpt.read_latest(job, ckpt.LATEST_STATE_DICT) == 10


def test_a_reader_of_a_pruned_version_gets_the_newer_one(trainer: Trainer, tmp_path: Path) -> None:
    """The explorer learnt of version 3; before it read the files the trainer published
    version 4, which deleted them: it loads version 4 instead."""
    job = tmp_path / "job"
    trainer.save_state_dict(job, 3)
    trainer.train_step(rollouts(8, seed=1))
    trainer.save_state_dict(job, 4)
    assert not ckpt.step_dir(job, 3).exists()
    version, state = weights.read_version(job, 3)
    assert version == 4
    assert all(torch.equal(state[k], v) for k, v in trainer.weights_for_sync().items())
