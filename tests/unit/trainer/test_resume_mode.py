"""``trainer.trainer_config.trainer.resume_mode``: where a run with
``continue_from_checkpoint`` resumes (``trinity.launch.resume.resume_step``), and the
trainer loading the checkpoint it names."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_testing import make_config, parameters, rollouts

from trinity.config import ConfigError, job_dir
from trinity.launch.resume import resume_step
from trinity.trainer.trainer import Trainer


def _config(model_dir: Path, tmp_path: Path, **loop: str):
    return make_config(
        model_dir, tmp_path, trainer={"trainer_config": {"trainer": loop}} if loop else {}
    )


@pytest.fixture
def saved(tiny_model_dir: Path, tmp_path: Path) -> tuple[Path, dict[int, dict]]:
    """A job dir with full checkpoints of steps 1 and 2, and the weights of each."""
    cfg = _config(tiny_model_dir, tmp_path)
    job = job_dir(cfg)
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=4)
    weights = {}
    for step in (1, 2):
        trainer.train_step(rollouts(8, seed=step))
        trainer.save_checkpoint(job, step)
        weights[step] = parameters(trainer.model)
    return job, weights


def test_auto_resumes_after_the_newest_and_disable_from_the_start(
    saved, tiny_model_dir: Path, tmp_path: Path
) -> None:
    job, _ = saved
    assert resume_step(_config(tiny_model_dir, tmp_path), job) == 2
    assert resume_step(_config(tiny_model_dir, tmp_path, resume_mode="auto"), job) == 2
    assert resume_step(_config(tiny_model_dir, tmp_path, resume_mode="disable"), job) == 0


def test_resume_path_resumes_the_checkpoint_it_names(
    saved, tiny_model_dir: Path, tmp_path: Path
) -> None:
    job, weights = saved
    cfg = _config(
        tiny_model_dir,
        tmp_path,
        resume_mode="resume_path",
        resume_from_path=str(job / "global_step_1"),
    )
    step = resume_step(cfg, job)
    assert step == 1
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=4)
    assert trainer.load_checkpoint(job, step) == 1
    for name, tensor in parameters(trainer.model).items():
        assert torch.equal(tensor, weights[1][name]), name
    # the newest checkpoint holds other weights: step 1 was loaded, not the latest
    assert any(not torch.equal(weights[1][n], weights[2][n]) for n in weights[1])


def test_resume_path_outside_the_job_or_without_optimizer_fails(
    saved, tiny_model_dir: Path, tmp_path: Path
) -> None:
    job, _ = saved
    elsewhere = tmp_path / "other" / "global_step_1"
    elsewhere.mkdir(parents=True)
    cfg = _config(
        tiny_model_dir, tmp_path, resume_mode="resume_path", resume_from_path=str(elsewhere)
    )
    with pytest.raises(ConfigError, match="is not a checkpoint of this run"):
        resume_step(cfg, job)
    (job / "global_step_3" / "actor").mkdir(parents=True)
    cfg.trainer.trainer_config.trainer.resume_from_path = str(job / "global_step_3")
    with pytest.raises(ConfigError, match="holds no full checkpoint") as caught:
        resume_step(cfg, job)
    assert caught.value.path == "trainer.trainer_config.trainer.resume_from_path"
