"""Data parallelism: two trainer ranks (Ray actors, FSDP2 over gloo) train exactly like one.

The one-rank trainer runs in the test process; the two ranks are ``TrainerRank`` actors
on a local Ray instance of our own. Both see the same global batches: 7 experiences, so
the ranks hold 4 and 3 rows, and with micro-batches of 3 rank 1 runs one padding
micro-batch. GRPO with a KL loss against the reference model and an entropy bonus, so
every loss term and the reference forward are split across the ranks.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "trainer"))
from trainer_testing import make_config, rollouts  # noqa: E402

from trinity.common.models.utils import load_fsdp_state_dict_from_verl_checkpoint  # noqa: E402
from trinity.trainer import checkpoint as ckpt  # noqa: E402
from trinity.trainer.distributed import RankInfo, free_port  # noqa: E402
from trinity.trainer.trainer import Trainer  # noqa: E402

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance of this test's own (never the machine's running cluster)."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def config(model_dir: Path, tmp_path: Path):
    return make_config(
        model_dir,
        tmp_path,
        "grpo",
        algorithm={
            "kl_loss_fn": "k2",
            "kl_loss_fn_args": {"kl_coef": 0.1},
            "entropy_loss_fn_args": {"entropy_coef": 0.01},
        },
        trainer={
            "trainer_config": {
                "actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 3}},
            }
        },
    )


def batches() -> list[list]:
    return [rollouts(7, group_size=4, seed=seed)[:7] for seed in (1, 2)]


class Ranks:
    """``world`` TrainerRank actors in one process group; rank 0's results come back."""

    def __init__(self, cfg, model_dir: Path, job_dir: Path, world: int) -> None:
        from trinity.launch.trainer_group import TrainerRank

        actor = ray.remote(TrainerRank).options(num_cpus=0.5)
        self.actors = [actor.remote(cfg, str(job_dir), str(model_dir), 10) for _ in range(world)]
        info = RankInfo(0, world, "127.0.0.1", free_port())
        ray.get([a.setup.remote(replace(info, rank=r)) for r, a in enumerate(self.actors)])

    def run(self, method: str, *args):
        """``Trainer.<method>(*args)`` on every rank; returns rank 0's result."""
        lead = self.actors[0].__ray_call__.remote(
            lambda self, *a: getattr(self.trainer, method)(*a), *args
        )
        refs = [a.call.remote(method, *args) for a in self.actors[1:]]
        result = ray.get(lead)
        ray.get(refs)
        return result

    def close(self) -> None:
        ray.get([a.shutdown.remote() for a in self.actors])
        for a in self.actors:
            ray.kill(a)


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], tol: float) -> None:
    assert a.keys() == b.keys()
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    assert worst <= tol, worst


@pytest.mark.slow
def test_two_ranks_train_like_one(local_ray, tiny_model_dir: Path, tmp_path: Path) -> None:
    from trinity.trainer.convert import convert

    cfg = config(tiny_model_dir, tmp_path)
    one = Trainer(cfg, model_dir=tiny_model_dir, total_steps=10)
    job = tmp_path / "job"
    ranks = Ranks(cfg, tiny_model_dir, job, world=2)
    third = rollouts(7, group_size=4, seed=3)[:7]
    try:
        before = one.weights_for_sync()
        for batch in batches():
            expected = one.train_step(batch)
            got = ranks.run("train_step", batch)
            for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "actor/grad_norm"):
                assert got[key] == pytest.approx(expected[key], abs=1e-5), key
        after_one = one.weights_for_sync()
        after_two = ranks.run("weights_for_sync")
        assert_close(after_two, after_one, 1e-5)
        # the update moved the weights far beyond the tolerance
        assert max(float((after_one[k] - before[k]).abs().max()) for k in before) > 1e-3

        # per-rank checkpoint shards; the documented loader merges them into the full weights
        path = ranks.run("save_checkpoint", job, 2)
        names = sorted(p.name for p in path.glob("*.pt"))
        assert names == [
            f"{kind}_world_size_2_rank_{r}.pt"
            for kind in ("extra_state", "model", "optim")
            for r in (0, 1)
        ]
        assert ckpt.read_latest(job) == 2
        assert_close(load_fsdp_state_dict_from_verl_checkpoint(path), after_two, 0.0)
        step3 = ranks.run("train_step", third)
        weights3 = ranks.run("weights_for_sync")
    finally:
        ranks.close()

    # trinity convert writes the merged weights as a Hugging Face model
    [(hf_dir, status)] = convert(job)
    assert status == "converted"
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    assert_close(model.state_dict(), after_two, 0.0)

    # two fresh ranks resume from the shards (weights, Adam state, LR schedule) and take
    # the same third step as the ranks that never stopped
    resumed = Ranks(cfg, tiny_model_dir, job, world=2)
    try:
        assert resumed.run("load_checkpoint", job) == 2
        assert_close(resumed.run("weights_for_sync"), after_two, 0.0)
        again = resumed.run("train_step", third)
        assert again["actor/pg_loss"] == pytest.approx(step3["actor/pg_loss"], abs=1e-7)
        assert_close(resumed.run("weights_for_sync"), weights3, 1e-7)
    finally:
        resumed.close()
