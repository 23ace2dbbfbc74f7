"""The GPUs Ray gives each actor of a run: its Ray options, from the device plan.

``trinity.config.device_plan`` splits the config's GPUs between the explorer, the
engine actors and the trainer ranks; here that plan becomes each actor's Ray
``num_gpus``. A config that asks for GPUs on a Ray cluster without any runs on CPU, as
a CPU config does (one printed line says so), rather than waiting for actors Ray can
never place. Inside an actor the device a model lives on follows what Ray gave it
(``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

from typing import Any

from trinity.config import Config
from trinity.config.device_plan import DevicePlan, device_plan
from trinity.launch.errors import RunError
from trinity.utils.resources import cluster_gpus


def run_plan(config: Config) -> DevicePlan:
    """The plan a run follows: the config's, or the cpu plan when the config asks for no
    GPU (Ray is not asked) or the Ray cluster has none."""
    if config.cluster.gpu_per_node == 0:
        return device_plan(config, on_gpu=False)
    return device_plan(config, on_gpu=cluster_gpus() > 0)


def check_cluster(config: Config, plan: DevicePlan, gpus: float | None = None) -> str | None:
    """The line a run prints about its GPUs (None for a CPU config); raises ``RunError``
    when the cluster's ``gpus`` (default: asked of Ray) are fewer than the plan's."""
    asked = config.cluster.gpu_per_node
    if asked == 0:
        return None
    if plan.kind == "cpu":
        return (
            f"no GPU: everything runs on CPU (cluster.gpu_per_node is {asked} but the Ray "
            "cluster has none)"
        )
    gpus = cluster_gpus() if gpus is None else gpus
    if gpus < plan.total_gpus:
        raise RunError(
            f"cluster.node_num x cluster.gpu_per_node = {plan.total_gpus} GPUs, but the Ray "
            f"cluster has {gpus:g}: lower cluster.gpu_per_node or join a larger cluster"
        )
    return "devices (planned; placement.json records Ray's ids): " + "; ".join(plan.lines())


def explorer_options(plan: DevicePlan) -> dict[str, Any]:
    """Ray resources of the explorer's actor beyond its CPUs."""
    return {"num_gpus": plan.explorer_gpus()}


def engine_options(plan: DevicePlan, model: str, replica: int) -> dict[str, Any]:
    """Ray resources of the actor of engine ``replica`` of ``model`` (its section path)."""
    return {"num_gpus": plan.engine_gpus(model, replica)}


def trainer_rank_options(plan: DevicePlan) -> dict[str, Any]:
    """Ray resources of each trainer rank's actor."""
    return {"num_gpus": plan.trainer_rank_gpus()}


def rank_bundle_gpus(plan: DevicePlan, ranks_per_node: int) -> dict[str, float]:
    """The GPU part of a trainer node's placement-group bundle."""
    gpus = plan.trainer_rank_gpus() * ranks_per_node
    return {"GPU": gpus} if gpus else {}
