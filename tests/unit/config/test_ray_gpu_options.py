"""The Ray GPU options each actor gets from the device plan, built without starting Ray."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from config_testing import minimal_config, resolved_config

from trinity.config.device_plan import auxiliary_path, device_plan
from trinity.explorer.engines import RolloutEngines
from trinity.launch import gpus
from trinity.launch.errors import RunError
from trinity.launch.trainer_group import _engine_gpu_ids

ROLLOUT = "explorer.rollout_model"


def _config(tmp_path: Path, gpu_per_node: int, engines: int = 1, tp: int = 1, **explorer: Any):
    data = minimal_config(tmp_path)
    data["cluster"] = {"gpu_per_node": gpu_per_node}
    data["explorer"] = {
        "rollout_model": {"engine_num": engines, "tensor_parallel_size": tp},
        **explorer,
    }
    return resolved_config(data)


def _options(plan) -> tuple[dict, dict, dict]:
    return (
        gpus.explorer_options(plan),
        gpus.engine_options(plan, ROLLOUT, 1),
        gpus.trainer_rank_options(plan),
    )


def test_cpu_config_asks_for_no_gpu(tmp_path: Path) -> None:
    cfg = _config(tmp_path, 0, engines=2)
    plan = gpus.run_plan(cfg)  # asks Ray nothing: the config wants no GPU
    assert _options(plan) == ({"num_gpus": 0}, {"num_gpus": 0}, {"num_gpus": 0})
    assert gpus.rank_bundle_gpus(plan, 2) == {}
    assert gpus.check_cluster(cfg, plan) is None  # no line printed: as before


def test_gpu_config_without_ray_gpus_runs_on_cpu(tmp_path: Path) -> None:
    cfg = _config(tmp_path, 2)
    plan = gpus.run_plan(cfg)  # Ray is not running here: the cluster has no GPU
    assert plan.kind == "cpu"
    assert _options(plan) == ({"num_gpus": 0}, {"num_gpus": 0}, {"num_gpus": 0})
    assert gpus.check_cluster(cfg, plan) == (
        "no GPU: everything runs on CPU (cluster.gpu_per_node is 2 but the Ray cluster has none)"
    )


def test_one_gpu_shares(tmp_path: Path) -> None:
    plan = device_plan(_config(tmp_path, 1))
    assert _options(plan) == ({"num_gpus": 0.5}, {"num_gpus": 0}, {"num_gpus": 0.5})


def test_disjoint_gpus_are_whole(tmp_path: Path) -> None:
    cfg = _config(tmp_path, 4, engines=2, tp=1)
    plan = device_plan(cfg)
    assert _options(plan) == ({"num_gpus": 1}, {"num_gpus": 1}, {"num_gpus": 1})
    assert gpus.rank_bundle_gpus(plan, 2) == {"GPU": 2}
    line = gpus.check_cluster(cfg, plan, gpus=4)
    assert line == (
        "devices (planned; placement.json records Ray's ids): GPU 0: explorer (rollout engine 0); "
        "GPU 1: rollout engine 1; GPU 2: trainer rank 0; GPU 3: trainer rank 1"
    )


def test_tensor_parallel_engines_ask_for_their_gpus(tmp_path: Path) -> None:
    plan = device_plan(_config(tmp_path, 4, engines=1, tp=2))
    assert gpus.explorer_options(plan) == {"num_gpus": 2}
    aux = _config(tmp_path, 4, auxiliary_models=[{"model_path": "judge", "engine_num": 2}])
    plan = device_plan(aux)
    assert gpus.engine_options(plan, auxiliary_path(0), 0) == {"num_gpus": 1}
    assert gpus.engine_options(plan, auxiliary_path(0), 1) == {"num_gpus": 1}


def test_a_cluster_with_fewer_gpus_than_the_plan_fails_on_one_line(tmp_path: Path) -> None:
    cfg = _config(tmp_path, 4)
    with pytest.raises(RunError) as info:
        gpus.check_cluster(cfg, device_plan(cfg), gpus=2)
    assert str(info.value) == (
        "cluster.node_num x cluster.gpu_per_node = 4 GPUs, but the Ray cluster has 2: "
        "lower cluster.gpu_per_node or join a larger cluster"
    )


def test_engine_gpu_ids_without_ray_are_empty() -> None:
    engines = RolloutEngines([SimpleNamespace(), SimpleNamespace()])  # local engines
    assert engines.gpu_ids() == [[], []]
    served = SimpleNamespace(path=ROLLOUT, engines=engines)
    role = SimpleNamespace(explorer=SimpleNamespace(served=[served]))
    assert _engine_gpu_ids(role) == {f"{ROLLOUT} engine 0": [], f"{ROLLOUT} engine 1": []}
    assert _engine_gpu_ids(SimpleNamespace()) == {}  # a role that failed to start
