"""Data parallelism: two trainer ranks (Ray actors, FSDP2 over gloo) train exactly like one.

The one-rank trainer runs in the test process; the two ranks are ``TrainerRank`` actors
on the suite's Ray head. Both see the same global batches: 7 experiences, so
the ranks hold 4 and 3 rows (balance_batch: rows 0, 2, 4, 6 and 1, 3, 5). The one-rank
trainer uses micro-batches of 3 rows; the ranks pack theirs to 22 tokens (use_dynamic_bsz),
which gives rank 0 (21 + 5 tokens) two micro-batches and rank 1 (22 tokens) one, so rank 1
runs one padding micro-batch. GRPO
with a KL loss against the reference model and an entropy bonus, so every loss term and
the reference forward are split across the ranks.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import ray
import torch
from cli_testing import (
    port_open,
    ray_environment,
    ray_nodes,
    run_demo,
    start_ray_head,
    wait_until,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "trainer"))
from trainer_testing import make_config, rollouts  # noqa: E402

from trinity.common.models.utils import load_fsdp_state_dict_from_verl_checkpoint  # noqa: E402
from trinity.trainer import checkpoint as ckpt  # noqa: E402
from trinity.trainer.distributed import host_rendezvous  # noqa: E402
from trinity.trainer.trainer import Trainer  # noqa: E402


@pytest.fixture(scope="module")
def local_ray(ray_client):
    """Ray for this module's tests: the suite's shared head (tests/conftest.py)."""
    return ray_client


def config(model_dir: Path, tmp_path: Path, max_tokens: int | None = None, **trainer):
    actor = {"ppo_micro_batch_size_per_gpu": 3}
    if max_tokens is not None:
        actor.update(use_dynamic_bsz=True, ppo_max_token_len_per_gpu=max_tokens)
    return make_config(
        model_dir,
        tmp_path,
        "grpo",
        algorithm={
            # Adam turns float noise in near-zero gradients into updates of up to lr * 1e-2
            # (g / (|g| + eps) with |g| ~ eps); lr 1e-4 keeps that below the 1e-5 bar
            "optimizer": {"lr": 1e-4, "weight_decay": 0.0},
            "kl_loss_fn": "k2",
            "kl_loss_fn_args": {"kl_coef": 0.1},
            "entropy_loss_fn_args": {"entropy_coef": 0.01},
        },
        trainer={
            **trainer,
            "trainer_config": {
                "actor_rollout_ref": {"actor": actor},
            },
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
        # every rank joins as a client of a store this process hosts (on a port it holds)
        self.store, info = host_rendezvous("127.0.0.1", world, timeout_s=600)
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


def shard_write_interval(job: Path, rank: int) -> tuple[float, float]:
    """When ``rank`` wrote its checkpoint shards, from its log."""
    log = (job / "log" / f"trainer_rank_{rank}.log").read_text()
    match = re.search(rf"rank {rank} wrote its checkpoint shards from ([\d.]+) to ([\d.]+)", log)
    assert match, log[-2000:]
    return float(match[1]), float(match[2])


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], tol: float) -> None:
    assert a.keys() == b.keys()
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    assert worst <= tol, worst


@pytest.mark.slow
def test_two_ranks_train_like_one(local_ray, tiny_model_dir: Path, tmp_path: Path) -> None:
    from trinity.trainer.convert import convert

    one = Trainer(config(tiny_model_dir, tmp_path), model_dir=tiny_model_dir, total_steps=10)
    cfg = config(tiny_model_dir, tmp_path, max_tokens=22, save_strategy="single_process")
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
        # the update moved the weights far beyond the tolerance (two Adam steps of ~lr each)
        assert max(float((after_one[k] - before[k]).abs().max()) for k in before) > 1e-4

        # per-rank checkpoint shards; the documented loader merges them into the full weights
        path = ranks.run("save_checkpoint", job, 2)
        names = sorted(p.name for p in path.glob("*.pt"))
        assert names == [
            f"{kind}_world_size_2_rank_{r}.pt"
            for kind in ("extra_state", "model", "optim")
            for r in (0, 1)
        ]
        assert ckpt.read_latest(job) == 2
        # save_strategy single_process: rank 1 wrote its shards after rank 0 had finished
        (start0, end0), (start1, end1) = (shard_write_interval(job, r) for r in (0, 1))
        assert start0 < end0 <= start1 < end1
        assert_close(load_fsdp_state_dict_from_verl_checkpoint(path), after_two, 0.0)
        step3 = ranks.run("train_step", third)
        weights3 = ranks.run("weights_for_sync")
        assert max(float((weights3[k] - after_two[k]).abs().max()) for k in weights3) > 1e-5

        # the ranks, a step past the checkpoint, load the shards back (weights, Adam state,
        # LR schedule) and take the same third step again, as ranks that never moved on
        assert ranks.run("load_checkpoint", job) == 2
        assert_close(ranks.run("weights_for_sync"), after_two, 0.0)
        again = ranks.run("train_step", third)
        assert again["actor/pg_loss"] == pytest.approx(step3["actor/pg_loss"], abs=1e-7)
        assert_close(ranks.run("weights_for_sync"), weights3, 1e-7)
    finally:
        ranks.close()

    # trinity convert writes the merged weights as a Hugging Face model
    [(hf_dir, status)] = convert(job)
    assert status == "converted"
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    assert_close(model.state_dict(), after_two, 0.0)


@pytest.fixture
def two_nodes():
    """A Ray cluster of two nodes on this machine (a head and one more ``ray start``),
    1 CPU each, token authentication off for the nodes and the client alike."""
    env = ray_environment(RAY_AUTH_MODE="disabled")
    common = ["--num-cpus", "1"]
    with ray_nodes(env) as start:
        head, address = start_ray_head(
            start, "--include-dashboard", "false", "--resources", '{"node_a": 1}', *common
        )
        wait_until(lambda: port_open(address), [head], "the head's GCS answered", 120)
        second = start("--address", address, "--resources", '{"node_b": 1}', *common)
        # one client waits for both nodes (a client's start-up costs seconds); a failed
        # one, e.g. joining while the head is still starting, is run again
        probe = (
            f"import time, ray; ray.init(address='{address}', log_to_driver=False)\n"
            "deadline = time.monotonic() + 60\n"
            "while sum(n['Alive'] for n in ray.nodes()) < 2:\n"
            "    assert time.monotonic() < deadline\n"
            "    time.sleep(0.5)\n"
        )

        def both_alive() -> bool:
            command = [sys.executable, "-c", probe]
            return (
                subprocess.run(command, env=env, capture_output=True, timeout=120).returncode == 0
            )

        wait_until(both_alive, [head, second], "two live nodes", 180)
        yield address, env


@pytest.mark.slow
def test_trinity_run_places_two_ranks_and_the_explorer_on_two_nodes(
    two_nodes, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """``trinity run`` on a two-node cluster: the two trainer ranks fill one node (their
    placement-group bundle takes its whole CPU), so the explorer runs on the other."""
    address, env = two_nodes
    result = run_demo(
        tiny_model_dir,
        tmp_path,
        f"cluster.ray_address={address}",
        "cluster.node_num=2",
        "trainer.trainer_config.trainer.n_gpus_per_node=2",
        "buffer.total_steps=1",
        "explorer.eval_on_startup=false",
        "buffer.explorer_input.eval_tasksets=[]",
        "buffer.trainer_input.experience_buffer.path=null",
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [job] = tmp_path.glob("trinity-demo/*")
    placement = json.loads((job / "placement.json").read_text())
    ranks = placement["trainer_ranks"]
    assert len(ranks) == 2 and ranks[0] == ranks[1]
    assert placement["explorer"] != ranks[0]
    shards = sorted(p.name for p in job.glob("global_step_1/actor/model_world_size_*"))
    assert shards == ["model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    assert (job / "log" / "trainer_rank_1.log").exists()
