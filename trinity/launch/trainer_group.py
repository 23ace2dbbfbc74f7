"""The trainer's ranks on Ray: rank 0 drives, ranks 1..N-1 follow.

Rank 0 is the ``TrainerRole`` actor: it reads each batch, reports metrics, publishes
weights and decides when to save, exactly as a one-rank trainer does. Ranks 1..N-1 are
``TrainerRank`` actors. Every step that runs a collective (train, gather weights,
save, export, resume) is started on all ranks at once by ``TrainerGroup``, rank 0's
view of the group; every rank gets the whole batch (``trinity.trainer.distributed``
explains the split).

Placement: one placement-group bundle per trainer node (``nnodes`` of them, on
different nodes), each holding that node's ``n_gpus_per_node`` ranks.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from trinity.config import Config
from trinity.config.trainer_ranks import RankLayout, check_data_parallel, trainer_layout
from trinity.launch.actor_start import deferred_start_errors, start_actor
from trinity.launch.gpus import rank_bundle_gpus, run_plan, trainer_rank_options
from trinity.utils.memory import TrainerHeap
from trinity.utils.resources import TRAINER_CPUS, gpu_ids
from trinity.utils.threads import torch_thread_method

if TYPE_CHECKING:
    from trinity.config.device_plan import DevicePlan
    from trinity.launch.stage_actors import StageActors
    from trinity.trainer.distributed import RankInfo


class PlacementError(RuntimeError):
    """The cluster cannot hold the trainer's ranks."""


class TrainerRank:
    """Trainer rank ``r`` > 0: a Trainer that rank 0 calls for every collective step."""

    def __init__(
        self,
        config: Config,
        job_dir: str,
        model_dir: str,
        total_steps: int,
        plugin_dirs: Sequence[str] = (),
    ) -> None:
        self.spec = (config, Path(job_dir), model_dir, total_steps, list(plugin_dirs))
        self.trainer = None

    @torch_thread_method
    def setup(self, info: RankInfo) -> None:
        """Join the process group, then build this rank's Trainer (its model shard)."""
        from trinity.trainer import distributed
        from trinity.trainer.trainer import Trainer

        config, job_dir, model_dir, total_steps, plugin_dirs = self.spec
        name = f"{config.trainer.name}_rank_{info.rank}"
        logger = start_actor(config, job_dir, name, plugin_dirs)
        distributed.init_process_group(info)
        self.heap = TrainerHeap(config.trainer.keep_memory_between_steps)  # as rank 0's
        self.trainer = Trainer(
            config, model_dir=model_dir, total_steps=total_steps, logger=logger, rank_info=info
        )
        logger.info("trainer rank %d of %d ready", info.rank, info.world_size)

    @torch_thread_method
    def call(self, method: str, *args: Any) -> None:
        """Run ``Trainer.<method>(*args)`` alongside rank 0; rank 0 keeps the results."""
        getattr(self.trainer, method)(*args)
        if method == "train_step":
            self.heap.after_step()  # as rank 0 does (TrainerRole)

    @torch_thread_method
    def shutdown(self) -> None:
        from trinity.trainer import distributed

        distributed.shutdown()


class TrainerGroup:
    """Rank 0's Trainer and the other ranks' actors: the collective methods of
    ``Trainer`` run on every rank, everything else is rank 0's."""

    def __init__(self, trainer, workers: Sequence[Any]) -> None:
        self.trainer = trainer
        self.workers = list(workers)

    def __getattr__(self, name: str) -> Any:  # tokenizer, global_step, logger, ...
        return getattr(self.trainer, name)

    def _on_all_ranks(self, method: str, *args: Any) -> Any:
        refs = [w.call.remote(method, *args) for w in self.workers]
        result = getattr(self.trainer, method)(*args)
        ray.get(refs)  # they finished the same collectives, so this returns at once
        return result

    def train_step(self, experiences: list) -> dict[str, float]:
        shared = ray.put(experiences)  # one copy in the object store for all ranks
        refs = [w.call.remote("train_step", shared) for w in self.workers]
        metrics = self.trainer.train_step(experiences)
        ray.get(refs)
        return metrics

    def weights_for_sync(self):
        return self._on_all_ranks("weights_for_sync")

    def save_checkpoint(self, job_dir: Path, step: int, keep: int | None = None) -> Path:
        return self._on_all_ranks("save_checkpoint", job_dir, step, keep)

    def save_state_dict(self, job_dir: Path, step: int) -> Path:
        return self._on_all_ranks("save_state_dict", job_dir, step)

    def export_hf(self, job_dir: Path, step: int) -> Path:
        return self._on_all_ranks("export_hf", job_dir, step)

    def load_checkpoint(self, job_dir: Path, step: int | None = None) -> int:
        return self._on_all_ranks("load_checkpoint", job_dir, step)

    def shutdown(self) -> None:
        from trinity.trainer import distributed

        refs = [w.shutdown.remote() for w in self.workers]
        distributed.shutdown()
        ray.get(refs)


def build_rank0(config: Config, workers: Sequence[Any], build) -> TrainerGroup | Any:
    """Rank 0's trainer: ``build(rank_info)`` makes the Trainer. With workers, this
    process hosts the group's rendezvous and every worker builds its rank meanwhile."""
    if not workers:
        return build(None)
    from trinity.trainer import distributed

    setups: list[Any] = []

    def start_others(info: RankInfo) -> None:
        setups.extend(w.setup.remote(replace(info, rank=r)) for r, w in enumerate(workers, start=1))

    info = distributed.start_group(ray.util.get_node_ip_address(), 1 + len(workers), start_others)
    trainer = build(info)
    ray.get(setups)
    return TrainerGroup(trainer, workers)


@dataclass
class TrainerActors:
    lead: Any  # rank 0, the TrainerRole
    ranks: list[Any]  # every rank's actor, rank 0 first
    placement_group: Any | None
    names: list[str]  # the actor names of ranks 1..N-1
    # a one-rank trainer a next stage may take over (trinity.launch.stage_actors): the
    # key it is kept under, and the ref of its rebuild when this stage took it over
    key: Any = None
    rebuilt: Any = None

    def shutdown(self) -> None:
        """All ranks leave the process group together (before the actors are killed)."""
        if len(self.ranks) > 1:
            ray.get(self.lead.shutdown_ranks.remote())

    def release(self) -> list[str]:
        """Free the placement group once the actors are killed; returns the rank names."""
        if self.placement_group is not None:
            ray.util.remove_placement_group(self.placement_group)
        return self.names


def start_trainer(
    config: Config,
    role_cls: type,
    role_args: tuple,
    *,
    job_dir: str,
    model_dir: str,
    total_steps: int,
    plugin_dirs: Sequence[str],
    kept: StageActors | None = None,
    plan: DevicePlan | None = None,
) -> TrainerActors:
    """Start the trainer's ranks; ``role_cls(*role_args, workers=...)`` is rank 0. A
    one-rank trainer is taken from ``kept`` when an earlier stage left one there.
    ``plan``: the run's device plan (default: ``gpus.run_plan(config)``)."""
    plan = run_plan(config) if plan is None else plan
    layout = trainer_layout(config, on_gpu=plan.kind != "cpu")
    check_data_parallel(config, layout)
    options = {"num_cpus": TRAINER_CPUS, **trainer_rank_options(plan)}
    if layout.world_size == 1:
        name = config.trainer.name

        def create():
            return _rank_options(role_cls, name, options)

        if kept is None or config.synchronizer.sync_method == "nccl":
            # (an NCCL weight group is the trainer's for its whole life)
            lead = create().remote(*role_args)
            return TrainerActors(lead, [lead], None, [])
        key = ("trainer", name, options["num_gpus"])
        lead, rebuilt = kept.start(key, create, *role_args)
        return TrainerActors(lead, [lead], None, [], key=key, rebuilt=rebuilt)
    if kept is not None and options["num_gpus"]:
        # the GPUs an earlier stage's trainer held, which this stage did not take over
        kept.kill_all()
    group = _reserve(layout, rank_bundle_gpus(plan, layout.per_node))
    strategies = [
        ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy(
            group, placement_group_bundle_index=rank // layout.per_node
        )
        for rank in range(layout.world_size)
    ]
    names = [f"{config.trainer.name}_rank_{rank}" for rank in range(1, layout.world_size)]
    workers = [
        _rank_options(TrainerRank, name, options, strategies[rank]).remote(
            config, job_dir, model_dir, total_steps, plugin_dirs
        )
        for rank, name in enumerate(names, start=1)
    ]
    lead = _rank_options(role_cls, config.trainer.name, options, strategies[0]).remote(
        *role_args, workers=workers
    )
    return TrainerActors(lead, [lead, *workers], group, names)


def _rank_options(cls: type, name: str, options: dict[str, Any], strategy: Any = None):
    extra = {"scheduling_strategy": strategy} if strategy is not None else {}
    # threaded (a status call may come during run): a start error is raised by the first call
    return ray.remote(deferred_start_errors(cls)).options(
        max_concurrency=2, name=name, **options, **extra
    )


def _reserve(layout: RankLayout, gpus: dict[str, float], timeout_s: float = 60.0):
    """One bundle per trainer node, each on a different node (STRICT_SPREAD); ``gpus``:
    each bundle's GPU part."""
    bundle = {"CPU": layout.per_node * TRAINER_CPUS, **gpus}
    strategy = "STRICT_SPREAD" if layout.nnodes > 1 else "PACK"
    group = ray.util.placement_group(
        [dict(bundle) for _ in range(layout.nnodes)], strategy=strategy
    )
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        ray.util.remove_placement_group(group)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        raise PlacementError(
            f"the trainer's {layout.world_size} ranks need {layout.nnodes} node(s) with {bundle} free "
            f"each (trainer.trainer_config.trainer.nnodes x n_gpus_per_node); the cluster has "
            f"{len(nodes)} live node(s) with {ray.available_resources()} free after {timeout_s:.0f} s"
        )
    return group


def _where(actors: list[Any], explorer: bool = False) -> list[tuple[str, int, Any]]:
    """The Ray node id, the process id and the GPU ids of each actor, asked of all at
    once; for the ``explorer`` the GPU ids of its engines too."""
    return ray.get([a.__ray_call__.remote(partial(_here, explorer)) for a in actors])


def _here(explorer: bool, role: Any) -> tuple[str, int, Any]:
    gpus: Any = gpu_ids()
    if explorer:
        gpus = {"explorer": gpus, "engines": _engine_gpu_ids(role)}
    return ray.get_runtime_context().get_node_id(), os.getpid(), gpus


def _engine_gpu_ids(role: Any) -> dict[str, list]:
    """The GPU ids of every engine of an explorer role, by model section and replica."""
    explorer = getattr(role, "explorer", None)  # None: the role failed to start
    found: dict[str, list] = {}
    for served in getattr(explorer, "served", []):
        for i, ids in enumerate(served.engines.gpu_ids()):
            found[f"{served.path} engine {i}"] = ids
    return found


def write_placement(job_dir: Path, explorer: Any | None, trainer: TrainerActors | None) -> dict:
    """Record the Ray node id of the explorer and of each trainer rank in
    ``<job_dir>/placement.json`` (which node ran what, for multi-node runs), under
    ``"pids"`` their process ids (a stage run in the processes of the stage before it
    shows that stage's ids, ``trinity.launch.stage_actors``) and under ``"gpus"`` the GPU
    ids Ray gave the explorer, each engine and each rank (empty lists on CPU)."""
    from trinity.trainer import checkpoint as ckpt

    placement: dict[str, Any] = {}
    pids: dict[str, Any] = {}
    gpus: dict[str, Any] = {}
    try:
        if explorer is not None:
            ((placement["explorer"], pids["explorer"], found),) = _where([explorer], True)
            gpus.update(found)
        if trainer is not None:
            where = _where(trainer.ranks)
            placement["trainer_ranks"] = [node for node, _, _ in where]
            pids["trainer_ranks"] = [pid for _, pid, _ in where]
            gpus["trainer_ranks"] = [ids for _, _, ids in where]
        placement["pids"] = pids
        placement["gpus"] = gpus
    except ray.exceptions.RayActorError as exc:
        # the actor failed to start; the run's own wait reports why
        logging.getLogger("trinity.launch").warning("placement not recorded: %s", exc)
        return placement
    ckpt.write_json_atomic(Path(job_dir) / "placement.json", placement)
    return placement
