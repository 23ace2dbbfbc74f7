"""``trinity run`` joins a cluster started separately with ``ray start --head``.

These tests start a real head node on this machine, so they run one at a time and
stop it afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))


@pytest.fixture
def ray_head():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
    started = subprocess.run(
        [RAY, "start", "--head", "--num-cpus", "2", "--disable-usage-stats", "--include-dashboard", "false"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert started.returncode == 0, started.stderr
    yield env
    subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


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
def test_token_mismatch_is_reported_not_hidden(ray_head: dict[str, str]) -> None:
    # the head runs with token authentication (Ray's default); this client turns it off
    env = {**ray_head, "RAY_AUTH_MODE": "disabled"}
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
def test_run_on_running_cluster(ray_head: dict[str, str], tiny_model_dir: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable, "-m", "trinity", "run",
            "--config", str(REPO / "examples/arithmetic/grpo.yaml"),
            f"model.model_path={tiny_model_dir}",
            f"checkpoint_root_dir={tmp_path}",
            "buffer.total_steps=1",
            "explorer.eval_on_startup=false",
            "buffer.explorer_input.eval_tasksets=[]",
            "buffer.trainer_input.experience_buffer.path=null",
        ],
        cwd=REPO, env=ray_head, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ray: joined" in result.stderr
    assert list(tmp_path.glob("trinity-demo/*/global_step_1/actor/model_world_size_1_rank_0.pt"))
