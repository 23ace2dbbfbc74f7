"""Checkpoints survive a crash at any moment: the step every "latest" pointer names
loads through the project's loaders, and a run resumed there saves on.

* a process saves steps as the trainer does (weights-only for checkpoint sync, pruning
  the older ones, and every other step the full checkpoint of the same step, then
  pruning) until it is SIGKILLed at a random moment; the delays are seeded, so a
  failure repeats;
* a crash just before each rename or deletion of a save that replaces a step: the
  windows between a kill's random moments, visited one by one.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest
import torch

from trinity.common.models.utils import load_fsdp_state_dict_from_verl_checkpoint
from trinity.trainer import checkpoint as ckpt

FORK = mp.get_context("fork")  # the savers share this process's torch: no import each time
KILLS = 18
HF_FILES = 8  # a config and a tokenizer


def weights(step: int) -> dict[str, torch.Tensor]:
    return {"embed.weight": torch.full((64, 32), float(step)), "norm.weight": torch.ones(32)}


def hf_save(directory: Path) -> None:
    directory.mkdir(parents=True)
    for i in range(HF_FILES):
        (directory / f"file_{i}.json").write_text('{"step": 0}')


def save_forever(job: Path, start: int, exchange: bool) -> None:
    """The trainer's saves from ``start`` on, until killed."""
    if not exchange:  # a system without RENAME_EXCHANGE: old steps are moved aside
        ckpt._exchange = lambda a, b: False
    for step in range(start, start + 10_000):
        common = {"model_state": weights(step), "hf_save": hf_save}
        # checkpoint sync publishes the step's weights, then the full checkpoint replaces them
        ckpt.save_actor_checkpoint(
            job, step, optim_state=None, extra_state=None, pointer=ckpt.LATEST_STATE_DICT, **common
        )
        ckpt.prune_weights_only(job)
        if (step - start) % 2:
            continue  # saved every other step: the other publishes are pruned by the next
        ckpt.save_actor_checkpoint(
            job,
            step,
            optim_state={"state": {}, "param_groups": [{"lr": 0.1 * step, "params": [0]}]},
            extra_state={"global_step": step},
            **common,
        )
        ckpt.prune_checkpoints(job, 2)


def check_latest(job: Path) -> int:
    """Load what each pointer names as a resumed trainer and explorer would; returns
    the newest full step."""
    for pointer in (ckpt.LATEST_STATE_DICT, ckpt.LATEST_CHECKPOINT):
        step = ckpt.read_latest(job, pointer)
        if step is None:
            continue
        loaded = load_fsdp_state_dict_from_verl_checkpoint(ckpt.step_dir(job, step) / "actor")
        assert loaded.keys() == weights(step).keys(), (pointer, step)
        assert all(torch.equal(loaded[k], v) for k, v in weights(step).items()), (pointer, step)
    step = ckpt.read_latest(job)
    if step is None:
        return 0
    assert torch.equal(
        ckpt.load_actor_shard(job, step, "model")["embed.weight"], weights(step)["embed.weight"]
    )
    optim = ckpt.load_actor_shard(job, step, "optim")
    assert optim["param_groups"][0]["lr"] == pytest.approx(0.1 * step)
    assert ckpt.load_actor_shard(job, step, "extra_state") == {"global_step": step}
    return step


@pytest.mark.slow
@pytest.mark.parametrize("exchange", [True, False], ids=["rename_exchange", "moved_aside"])
def test_the_latest_checkpoint_loads_after_a_kill_at_any_moment(
    exchange: bool, tmp_path: Path
) -> None:
    job = tmp_path / "job"
    rng = random.Random(20)
    steps = []
    for _ in range(KILLS):
        if not exchange:
            ckpt.restore_replaced(job)  # what a resumed run does first (launch.resume)
        start = check_latest(job) + 1
        saver = FORK.Process(target=save_forever, args=(job, start, exchange))
        saver.start()
        time.sleep(rng.uniform(0.02, 0.5))
        os.kill(saver.pid, signal.SIGKILL)
        saver.join()
        assert saver.exitcode == -signal.SIGKILL  # it was still saving: no error
        if not exchange:
            ckpt.restore_replaced(job)
        steps.append(check_latest(job))
        # two full checkpoints, the newest publish, and one a kill kept from its pruning
        assert len(ckpt.list_steps(job)) <= 4, ckpt.list_steps(job)
    # the savers made progress between kills (the checks did not all see nothing)
    # (a full save every other step: about one per kill)
    assert steps[-1] > KILLS // 3 and steps == sorted(steps)


@pytest.mark.parametrize("exchange", [True, False], ids=["rename_exchange", "moved_aside"])
def test_a_crash_while_a_step_is_replaced_leaves_it_loadable(
    exchange: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "job"
    if not exchange:
        monkeypatch.setattr(ckpt, "_exchange", lambda a, b: False)
    ckpt.save_actor_checkpoint(
        job,
        3,
        model_state=weights(3),
        optim_state=None,
        extra_state=None,
        hf_save=hf_save,
        pointer=ckpt.LATEST_STATE_DICT,
    )
    (job / "global_step_3" / "critic").mkdir()  # the critic is saved before the actor
    (job / "global_step_3" / "critic" / "model_world_size_1_rank_0.pt").write_bytes(b"c")
    crashes = []
    rename, replace, rmtree = os.rename, os.replace, shutil.rmtree

    def crash_here() -> None:
        """The job directory as a crash now would leave it, once a run resumes there."""
        crashed = Path(tempfile.mkdtemp(dir=tmp_path, prefix="crash_"))
        crashed.rmdir()
        shutil.copytree(job, crashed, symlinks=True, copy_function=shutil.copy2)
        ckpt.restore_replaced(crashed)
        check_latest(crashed)
        crashes.append(crashed)

    probing = []

    def probed(real):
        def call(*args, **kwargs):
            if not probing:  # not the probe's own renames (restore_replaced)
                probing.append(True)
                try:
                    crash_here()
                finally:
                    probing.clear()
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(os, "rename", probed(rename))
    monkeypatch.setattr(os, "replace", probed(replace))
    monkeypatch.setattr(shutil, "rmtree", probed(rmtree))
    ckpt.save_actor_checkpoint(
        job,
        3,
        model_state=weights(3),
        optim_state={"state": {}, "param_groups": [{"lr": 0.3, "params": [0]}]},
        extra_state={"global_step": 3},
        hf_save=hf_save,
    )
    monkeypatch.undo()
    crash_here()
    assert len(crashes) >= 3  # the save renamed and deleted: its windows were visited
    assert check_latest(job) == 3
    assert (job / "global_step_3" / "critic" / "model_world_size_1_rank_0.pt").read_bytes() == b"c"
    assert [p.name for p in job.iterdir() if p.name.startswith(".global_step")] == []
