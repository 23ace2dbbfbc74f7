"""device_plan: how the config's GPUs are split between engines and trainer ranks (no CUDA)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from trinity.config import ConfigError, config_from_dict, dry_run_report, resolve
from trinity.config.device_plan import COLOCATED_SHARE, auxiliary_path, device_plan
from trinity.config.no_effect import set_without_effect
from trinity.config.validate import validate

NOW = datetime(2024, 5, 6, 7, 8, 9)
ROLLOUT = "explorer.rollout_model"


def _config(minimal: dict[str, Any], gpus: int, engines: int = 1, tp: int = 1, **more: Any):
    minimal["cluster"] = {"gpu_per_node": gpus, "node_num": more.pop("nodes", 1)}
    explorer = minimal.setdefault("explorer", {})
    explorer["rollout_model"] = {"engine_num": engines, "tensor_parallel_size": tp}
    for key, value in more.items():
        explorer[key] = value
    cfg = resolve(config_from_dict(minimal), now=NOW)
    validate(cfg)  # where an impossible plan is reported, so --dry-run shows it
    return cfg


def _gpus(plan) -> dict[str, tuple[int, ...]]:
    return {actor.name: actor.gpus for actor in plan.actors}


def test_no_gpu_asks_ray_for_none(minimal: dict[str, Any]) -> None:
    plan = device_plan(_config(minimal, 0, engines=2))
    assert plan.kind == "cpu" and plan.actors == () and plan.lines() == []
    assert plan.explorer_gpus() == plan.trainer_rank_gpus() == plan.engine_gpus(ROLLOUT, 1) == 0


def test_a_gpu_config_on_a_cluster_without_gpus_is_the_cpu_plan(minimal: dict[str, Any]) -> None:
    plan = device_plan(_config(minimal, 4, engines=2), on_gpu=False)
    assert plan.kind == "cpu" and plan.explorer_gpus() == plan.trainer_rank_gpus() == 0


def test_one_gpu_colocates_explorer_and_trainer(minimal: dict[str, Any]) -> None:
    plan = device_plan(_config(minimal, 1))
    assert plan.kind == "colocate"
    assert plan.explorer_gpus() == plan.trainer_rank_gpus() == COLOCATED_SHARE == 0.5
    assert plan.lines() == ["GPU 0: explorer (rollout engine 0) + trainer rank 0 (colocated)"]


def test_one_gpu_keeps_auxiliary_engines_in_the_explorer(minimal: dict[str, Any]) -> None:
    cfg = _config(minimal, 1, auxiliary_models=[{"model_path": "judge"}])
    plan = device_plan(cfg)
    assert plan.first_engine_in_explorer(auxiliary_path(0))
    assert plan.lines() == [
        "GPU 0: explorer (rollout engine 0, auxiliary model 0 engine 0) + trainer rank 0 "
        "(colocated)"
    ]


def test_one_gpu_in_mode_train_or_explore_asks_for_the_same_share(
    minimal: dict[str, Any],
) -> None:
    # so a stage of one mode fits beside an actor the stage before handed on
    minimal["mode"] = "explore"
    plan = device_plan(_config(minimal, 1))
    assert plan.explorer_gpus() == COLOCATED_SHARE and plan.trainer_rank_gpus() == 0
    assert plan.lines() == ["GPU 0: explorer (rollout engine 0)"]


@pytest.mark.parametrize(
    ("key", "engines", "tp"),
    [("engine_num", 2, 1), ("tensor_parallel_size", 1, 2)],
)
def test_one_gpu_gives_no_engine_gpus_of_its_own(
    minimal: dict[str, Any], key: str, engines: int, tp: int
) -> None:
    minimal["mode"] = "explore"  # (in mode both the trainer-needs-one check would not apply)
    with pytest.raises(ConfigError) as info:
        _config(minimal, 1, engines=engines, tp=tp)
    message = str(info.value)
    assert message.startswith(f"{ROLLOUT}.{key}: with one GPU") and "\n" not in message
    assert "(given: 2)" in message and "1, or more GPUs (cluster.gpu_per_node)" in message


def test_two_gpus_one_each(minimal: dict[str, Any]) -> None:
    plan = device_plan(_config(minimal, 2))
    assert plan.kind == "disjoint"
    assert _gpus(plan) == {"explorer": (0,), "trainer rank 0": (1,)}
    assert plan.explorer_gpus() == plan.trainer_rank_gpus() == 1
    assert plan.lines() == ["GPU 0: explorer (rollout engine 0)", "GPU 1: trainer rank 0"]


@pytest.mark.parametrize(
    ("engines", "tp", "expected"),
    [
        (
            1,
            1,
            {
                "explorer": (0,),
                "trainer rank 0": (1,),
                "trainer rank 1": (2,),
                "trainer rank 2": (3,),
            },
        ),
        (
            2,
            1,
            {
                "explorer": (0,),
                "rollout engine 1": (1,),
                "trainer rank 0": (2,),
                "trainer rank 1": (3,),
            },
        ),
        (1, 2, {"explorer": (0, 1), "trainer rank 0": (2,), "trainer rank 1": (3,)}),
    ],
)
def test_four_gpus_engines_first_then_the_trainer(
    minimal: dict[str, Any], engines: int, tp: int, expected: dict
) -> None:
    plan = device_plan(_config(minimal, 4, engines=engines, tp=tp))
    assert _gpus(plan) == expected  # the trainer's ranks: the GPUs the engines leave
    assert plan.explorer_gpus() == tp
    assert plan.engine_gpus(ROLLOUT, 1) == (tp if engines == 2 else 0)
    assert plan.trainer_rank_gpus() == 1


def test_four_gpus_two_engines_of_two_leave_the_trainer_none(minimal: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"need 4 GPUs but the cluster has 4 and the trainer"):
        _config(minimal, 4, engines=2, tp=2)


def test_auxiliary_engines_have_their_own_gpus(minimal: dict[str, Any]) -> None:
    aux = [{"model_path": "judge", "engine_num": 2}]
    plan = device_plan(_config(minimal, 4, auxiliary_models=aux))
    assert _gpus(plan) == {
        "explorer": (0,),
        "auxiliary model 0 engine 0": (1,),
        "auxiliary model 0 engine 1": (2,),
        "trainer rank 0": (3,),
    }
    assert not plan.first_engine_in_explorer(auxiliary_path(0))
    assert plan.first_engine_in_explorer(ROLLOUT)
    assert plan.engine_gpus(auxiliary_path(0), 0) == plan.engine_gpus(auxiliary_path(0), 1) == 1


def test_engines_stay_on_one_node(minimal: dict[str, Any]) -> None:
    # 2 nodes x 2 GPUs: an engine of 3 GPUs would span both
    with pytest.raises(ConfigError) as info:
        _config(minimal, 2, engines=1, tp=3, nodes=2)
    assert str(info.value).startswith(f"{ROLLOUT}.tensor_parallel_size: an engine's GPUs")
    assert "at most 2" in str(info.value)


def test_two_nodes_name_the_node(minimal: dict[str, Any]) -> None:
    minimal["trainer"] = {"trainer_config": {"trainer": {"nnodes": 1, "n_gpus_per_node": 2}}}
    plan = device_plan(_config(minimal, 2, engines=2, nodes=2))
    assert plan.lines() == [
        "node 0 GPU 0: explorer (rollout engine 0)",
        "node 0 GPU 1: rollout engine 1",
        "node 1 GPU 0: trainer rank 0",
        "node 1 GPU 1: trainer rank 1",
    ]


def test_explicit_ranks_beyond_the_free_gpus(minimal: dict[str, Any]) -> None:
    minimal["trainer"] = {"trainer_config": {"trainer": {"nnodes": 1, "n_gpus_per_node": 4}}}
    with pytest.raises(ConfigError) as info:
        _config(minimal, 4)
    message = str(info.value)
    assert message.startswith("trainer.trainer_config.trainer.n_gpus_per_node: the trainer's")
    assert "engines leave 3 of 4" in message and "(given: 4)" in message


def test_explicit_ranks_that_leave_gpus_unused(minimal: dict[str, Any]) -> None:
    minimal["trainer"] = {"trainer_config": {"trainer": {"nnodes": 1, "n_gpus_per_node": 1}}}
    plan = device_plan(_config(minimal, 4))
    assert plan.lines()[-2:] == ["GPU 2: unused", "GPU 3: unused"]


def test_mode_train_gives_every_gpu_to_the_trainer(minimal: dict[str, Any]) -> None:
    minimal["mode"] = "train"
    minimal["buffer"]["total_steps"] = 2
    minimal["buffer"]["trainer_input"]["experience_buffer"]["path"] = "/data/experiences"
    plan = device_plan(_config(minimal, 2, engines=4))  # engines of no mode train actor
    assert _gpus(plan) == {"trainer rank 0": (0,), "trainer rank 1": (1,)}


def test_dry_run_report_of_a_gpu_config_on_this_machine(minimal: dict[str, Any]) -> None:
    report = dry_run_report(_config(minimal, 1), cpus=2)
    resources = report.split("# Resources\n")[1].splitlines()
    assert resources[:6] == [
        "GPUs: 1 node(s) x 1 = 1",
        "explorer rollout model: 1 engine(s) x 1 GPU(s) = 1",
        "trainer: shares the one GPU with the explorer (colocated)",
        "device plan (Ray picks the GPU ids; placement.json records them):",
        "GPU 0: explorer (rollout engine 0) + trainer rank 0 (colocated)",
        "Ray GPU requests: 0.5 GPU per actor, so the explorer and the trainer fit on the one "
        "GPU together",
    ]


def test_dry_run_report_of_disjoint_gpus(minimal: dict[str, Any]) -> None:
    report = dry_run_report(_config(minimal, 4, engines=2), cpus=2)
    assert "GPU 1: rollout engine 1\nGPU 2: trainer rank 0\nGPU 3: trainer rank 1\n" in report
    assert "trainer: 2 GPU(s) (the rest)" in report
    # the same config where the machine has no GPU: the CPU plan and its one warning line
    cpu = dry_run_report(_config(minimal, 4, engines=2), gpus_available=0, cpus=2)
    assert "(cluster.gpu_per_node is 4 but this machine has none)" in cpu
    assert "device plan" not in cpu


@pytest.mark.parametrize("engine_type", ["vllm", "vllm_async"])
def test_vllm_means_the_built_in_engine(minimal: dict[str, Any], engine_type: str) -> None:
    minimal["explorer"] = {"rollout_model": {"engine_type": engine_type}}
    [(key, why)] = set_without_effect(config_from_dict(minimal))
    assert key == "explorer.rollout_model.engine_type"
    assert "mean the built-in transformers engine" in why
