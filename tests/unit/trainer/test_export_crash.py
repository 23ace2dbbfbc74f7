"""An export into a checkpoint (``huggingface/``) killed midway leaves the previous one
whole: the exporting process is killed by the kernel (SIGXFSZ) when a write passes a
file-size limit, so each limit stops it in another file of the export."""

from __future__ import annotations

import multiprocessing as mp
import resource
import signal
from pathlib import Path

import pytest
import torch
from trainer_testing import make_config, rollouts

from trinity.trainer import checkpoint as ckpt
from trinity.trainer.trainer import Trainer

FORK = mp.get_context("fork")  # the child exports the parent's trained model


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def export_under_limit(trainer: Trainer, job: Path, limit: int) -> None:
    """Export step 1, killed like a crash when a file grows past ``limit`` bytes."""
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: die, don't raise
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    trainer.export_hf(job, 1)


@pytest.fixture(scope="module")
def exported(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """A trainer whose weights moved on after step 1 was saved and exported."""
    tmp_path = tmp_path_factory.mktemp("export")
    trainer = Trainer(
        make_config(tiny_model_dir, tmp_path), model_dir=tiny_model_dir, total_steps=3
    )
    job = tmp_path / "job"
    trainer.train_step(rollouts(8))
    trainer.save_checkpoint(job, 1)
    trainer.export_hf(job, 1)
    trainer.train_step(rollouts(8, seed=1))
    return trainer, job


# 4 KiB: in the tokenizer (about 2 MB); 4 MiB: in the weights (about 13 MB)
@pytest.mark.parametrize("limit", [4096, 4 << 20])
def test_an_export_killed_midway_leaves_the_previous_one(exported, limit: int) -> None:
    from transformers import AutoModelForCausalLM

    trainer, job = exported
    hf_dir = ckpt.step_dir(job, 1) / "actor" / "huggingface"
    before = files(hf_dir)
    assert "model.safetensors" in before

    child = FORK.Process(target=export_under_limit, args=(trainer, job, limit))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGXFSZ  # killed in the middle of the export
    assert files(hf_dir) == before

    trainer.export_hf(job, 1)  # the next export completes and clears what the kill left
    assert [p.name for p in hf_dir.parent.iterdir() if p.name.startswith(".")] == []
    loaded = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).state_dict()
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(loaded[name], value), name
