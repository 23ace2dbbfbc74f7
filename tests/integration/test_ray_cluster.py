"""``trinity run`` joins a cluster started separately with ``ray start --head``.

These tests start a real head node on this machine, so they run one at a time and
stop it afterwards.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_testing import (
    REPO,
    free_port,
    ray_environment,
    ray_nodes,
    run_demo,
    start_ray_head,
    wait_until,
)
from safetensors.torch import load_file


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory):
    """A head node of our own (``ray start --head --block``), stopped by signalling it.

    ``ray stop`` would stop every Ray instance on the machine, including other runs. One
    head serves the module's tests (each joins it from its own process). Started in a
    directory of its own, as a cluster a user started elsewhere: its workers start there,
    not in the repository the runs start from.
    """
    from trinity.launch.cluster import running_cluster_address

    env = ray_environment()
    with ray_nodes(env, cwd=tmp_path_factory.mktemp("ray_head_cwd")) as start:
        head, _ = start_ray_head(start, "--num-cpus", "2", "--include-dashboard", "false")
        wait_until(lambda: running_cluster_address() is not None, [head], "the Ray head", 120)
        yield env


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


_WORKER_SETTINGS = """
import json, os
import ray
from trinity.launch.cluster import connect
print(connect('auto', 'trinity-test', overlapping=True))

@ray.remote
def settings():
    return [os.environ.get(k) for k in ("THP_MEM_ALLOC_ENABLE", "OMP_WAIT_POLICY")] + [os.nice(0)]

names = ("THP_MEM_ALLOC_ENABLE", "OMP_WAIT_POLICY", "RAY_worker_niceness", "RAY_DEDUP_LOGS")
print(json.dumps({"worker": ray.get(settings.remote()), "driver": [k for k in names if k in os.environ]}))
"""


@pytest.mark.slow
def test_a_stale_address_starts_a_local_instance_that_tunes_its_workers() -> None:
    # first in the module: the shared head below would otherwise be found and joined.
    # Ray exports RAY_ADDRESS after ray.init; children of such a process inherit it: one
    # whose cluster is gone does not stop a run, which starts an instance of its own
    skip = ("RAY_ADDRESS", "THP_MEM_ALLOC_ENABLE", "OMP_WAIT_POLICY", "RAY_worker_niceness")
    env = {k: v for k, v in os.environ.items() if k not in skip and k != "RAY_DEDUP_LOGS"}
    env["RAY_ADDRESS"] = f"127.0.0.1:{free_port()}"
    result = _python(_WORKER_SETTINGS, env)
    assert result.returncode == 0, result.stderr
    how, line = result.stdout.strip().splitlines()[-2:]
    assert how == "started"
    got = json.loads(line)
    assert got["worker"] == ["1", "PASSIVE", 0]  # huge pages, sleeping OpenMP, niceness 0
    assert got["driver"] == []  # the driver's own environment is left as it was


@pytest.mark.slow
def test_connect_joins_running_head(ray_head: dict[str, str]) -> None:
    code = (
        "from trinity.launch.cluster import connect, running_cluster_address\n"
        "assert running_cluster_address() is not None\n"
        "print(connect(None, 'trinity-test'))\n"
        "import ray; print(sorted(ray.nodes()[0]['Resources']))\n"
    )
    result = _python(code, ray_head)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "joined"


@pytest.mark.slow
def test_connect_joins_running_head_by_its_address(ray_head: dict[str, str]) -> None:
    # an explicit address (not "auto"): the client must pick up the head's token itself
    env = {k: v for k, v in ray_head.items() if k != "RAY_AUTH_MODE"}
    code = (
        "from trinity.launch.cluster import connect, running_cluster_address\n"
        "address = running_cluster_address()\n"
        "host, port = address.rsplit(':', 1)\n"
        "print(connect(f'127.0.0.1:{port}', 'trinity-test'))\n"
        "import ray; print(len(ray.nodes()))\n"
    )
    result = _python(code, env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["joined", "1"]


@pytest.mark.slow
def test_token_mismatch_is_reported_not_hidden(ray_head: dict[str, str]) -> None:
    # the head runs with token authentication (Ray's default); this client turns it off.
    # Ray retries a refused client once a second, 20 times by default: 2 show the same
    env = {**ray_head, "RAY_AUTH_MODE": "disabled", "RAY_NUM_REDIS_GET_RETRIES": "2"}
    code = (
        "from trinity.launch.cluster import ClusterError, connect\n"
        "try:\n"
        "    connect(None, 'trinity-test')\n"
        "except ClusterError as err:\n"
        "    print('ClusterError:', err)\n"
    )
    result = _python(code, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ClusterError: cannot join the Ray cluster at"), result.stdout
    assert "RAY_AUTH_MODE" in result.stdout


@pytest.mark.slow
def test_two_step_demo_run_on_the_running_cluster(
    ray_head: dict[str, str], tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The demo config for 2 steps, joining the head without an address (the machine's
    running cluster): every file the run writes, and a policy that moved."""
    result = run_demo(
        tiny_model_dir,
        tmp_path,
        "name=e2e",
        "continue_from_checkpoint=true",
        "buffer.total_steps=2",
        "explorer.eval_interval=2",
        "trainer.save_interval=1",
        "explorer.runner_per_model=8",
        env=ray_head,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "ray: joined" in result.stderr
    last_line = result.stdout.strip().splitlines()[-1]
    assert last_line.startswith("eval accuracy: "), result.stdout
    # the actors' start-up output (transformers' progress bars) stays off the terminal
    assert "Loading weights" not in result.stderr

    job = tmp_path / "trinity-demo" / "e2e"
    for rel in (
        "log/explorer.log",
        "log/trainer.log",
        "log/explorer_runner_0.log",
        "monitor/summary.png",
        "monitor/report.html",
        "latest_checkpointed_iteration.txt",
        "explorer_meta.json",
        "trainer_meta.json",
        "global_step_2/actor/model_world_size_1_rank_0.pt",
        "global_step_2/actor/extra_state_world_size_1_rank_0.pt",
        "global_step_2/actor/huggingface/config.json",
        "buffer/arithmetic_buffer.db",
    ):
        assert (job / rel).exists(), rel
    # the demo keeps one checkpoint, without the optimizer's state (save_contents)
    assert sorted(p.name for p in job.glob("global_step_*")) == ["global_step_2"]
    assert not (job / "global_step_2/actor/optim_world_size_1_rank_0.pt").exists()
    assert (job / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    # one node, sync_method memory: the weights went through the shared file, which the
    # run removed; the explorer took both versions
    trainer_log = (job / "log/trainer.log").read_text()
    assert "keeps the memory a step frees" in trainer_log  # the default
    (slot,) = re.findall(r"published through the shared file (\S+)", trainer_log)
    assert not Path(slot).exists()
    explorer_log = (job / "log/explorer.log").read_text()
    assert "synchronized to policy version 1" in explorer_log
    assert "synchronized to policy version 2" in explorer_log
    png = (job / "monitor" / "summary.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert "<img" in (job / "monitor" / "report.html").read_text()
    assert "best eval/arithmetic_eval/accuracy/mean" in result.stderr
    assert "final rollout/reward/mean=" in result.stderr
    assert list((job / "monitor" / "tensorboard").glob("e2e_trainer/events.*"))
    assert list((job / "monitor" / "tensorboard").glob("e2e_explorer/events.*"))

    # the policy moved: trained weights differ from the initial ones
    initial = load_file(tiny_model_dir / "model.safetensors")
    trained = torch.load(
        job / "global_step_2/actor/model_world_size_1_rank_0.pt", weights_only=True
    )
    changed = [k for k, v in initial.items() if not torch.equal(v.float(), trained[k].float())]
    assert changed, "no parameter changed after two GRPO steps"

    # every logged trainer metric is finite, and the documented ones are there
    rows = [
        json.loads(line)
        for line in (job / "monitor" / "e2e_trainer_metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/lr", "time/train_step"):
            assert key in row
        assert all(math.isfinite(v) for v in row.values() if isinstance(v, float))
    evals = [
        json.loads(line)
        for line in (job / "monitor" / "e2e_explorer_metrics.jsonl").read_text().splitlines()
    ]
    assert any("eval/arithmetic_eval/accuracy/mean" in r for r in evals)

    # the experience backup in the job dir holds every experience the explorer produced
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from trinity.common.schema.sql_schema import ExperienceModel

    sess = sessionmaker(bind=create_engine(f"sqlite:///{job}/buffer/arithmetic_buffer.db"))()
    exps = [ExperienceModel.to_experience(e) for e in sess.query(ExperienceModel).all()]
    assert len(exps) == 2 * 2 * 8
    assert all(e.response_text is not None for e in exps)
