"""Which GPU each actor of a run gets, computed from the config alone.

The cluster has ``cluster.node_num x cluster.gpu_per_node`` GPUs, numbered node by node
(GPU ``g`` is on node ``g // gpu_per_node``). Three kinds of plan:

- ``cpu``: ``gpu_per_node`` 0, or a Ray cluster without GPUs (``on_gpu=False``). No
  actor asks Ray for a GPU; everything runs as on any CPU machine.
- ``colocate``: one GPU in all. The explorer (rollout engine 0 and each auxiliary
  model's engine 0, all in its process) and the single trainer rank share GPU 0: each
  asks Ray for ``COLOCATED_SHARE`` of it, so Ray puts both there. Every model then has
  one engine of ``tensor_parallel_size`` 1, and the trainer one rank; the engine's KV
  memory is bounded by its ``gpu_memory_utilization``.
- ``disjoint``: each actor has whole GPUs of its own. Each rollout engine takes
  ``tensor_parallel_size`` GPUs (engine 0 in the explorer's actor, engines 1.. in their
  own), then each auxiliary model's engines (every one in its own actor), each placed
  on the first node with room for all its GPUs; then each trainer rank one GPU, the
  ranks of one node together (``trainer_ranks.trainer_layout``: unset, the trainer gets
  the GPUs the engines leave).

A mode runs only its actors: ``train`` no engine, ``explore`` and ``bench`` no trainer
(bench hosts engine 0 in the driver process). The GPU numbers are the plan's; Ray
chooses the real ids, which ``placement.json`` records (``trinity.launch.gpus``).
An impossible plan raises a ``ConfigError`` from validation, so ``--dry-run`` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trinity.config.colocate import check_colocated_gpus
from trinity.config.errors import ConfigError
from trinity.config.schema import Config
from trinity.config.trainer_ranks import trainer_layout

# Ray's num_gpus of each of the two actors sharing the one GPU of a colocated run
COLOCATED_SHARE = 0.5
ROLLOUT = "explorer.rollout_model"
_RANKS = "trainer.trainer_config.trainer"


def auxiliary_path(index: int) -> str:
    return f"explorer.auxiliary_models[{index}]"


@dataclass(frozen=True)
class ActorDevices:
    """One actor of the plan.

    ``name``: how the plan calls it ("explorer", "rollout engine 1", "auxiliary model 0
    engine 0", "trainer rank 0"); ``role``: explorer, engine or trainer; ``num_gpus``:
    what it asks Ray for; ``gpus``: the plan's GPU numbers; ``hosts``: the engines it
    runs in its process; ``model``/``replica``: an engine actor's model section and index.
    """

    name: str
    role: Literal["explorer", "engine", "trainer"]
    num_gpus: float
    gpus: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    model: str = ""
    replica: int = 0


@dataclass(frozen=True)
class DevicePlan:
    kind: Literal["cpu", "colocate", "disjoint"]
    node_num: int
    gpu_per_node: int
    actors: tuple[ActorDevices, ...] = ()

    @property
    def total_gpus(self) -> int:
        return 0 if self.kind == "cpu" else self.node_num * self.gpu_per_node

    def explorer_gpus(self) -> float:
        """Ray's ``num_gpus`` of the explorer's actor (it hosts rollout engine 0)."""
        return next((a.num_gpus for a in self.actors if a.role == "explorer"), 0)

    def trainer_rank_gpus(self) -> float:
        """Ray's ``num_gpus`` of each trainer rank."""
        return next((a.num_gpus for a in self.actors if a.role == "trainer"), 0)

    def engine_gpus(self, model: str, replica: int) -> float:
        """Ray's ``num_gpus`` of the actor of engine ``replica`` of ``model`` (a section
        path such as ``explorer.auxiliary_models[0]``); 0 when the plan has none."""
        for a in self.actors:
            if a.role == "engine" and a.model == model and a.replica == replica:
                return a.num_gpus
        return 0

    def first_engine_in_explorer(self, model: str) -> bool:
        """Whether engine 0 of ``model`` runs in the explorer's process (always for the
        rollout model; for an auxiliary model unless the plan gives it GPUs of its own)."""
        return model == ROLLOUT or self.engine_gpus(model, 0) == 0

    def lines(self) -> list[str]:
        """The plan as the dry-run report and the run's start print it: one line per GPU."""
        if self.kind == "cpu":
            return []
        by_gpu: dict[int, list[ActorDevices]] = {g: [] for g in range(self.total_gpus)}
        for actor in self.actors:
            for g in actor.gpus:
                by_gpu[g].append(actor)
        lines = []
        for g, actors in by_gpu.items():
            where = f"node {g // self.gpu_per_node} GPU {g % self.gpu_per_node}"
            if self.node_num == 1:
                where = f"GPU {g}"
            text = " + ".join(_describe(a) for a in actors) or "unused"
            if len(actors) > 1:
                text += " (colocated)"
            lines.append(f"{where}: {text}")
        return lines


def _describe(actor: ActorDevices) -> str:
    inside = ", ".join(actor.hosts)
    return f"{actor.name} ({inside})" if inside else actor.name


def device_plan(cfg: Config, *, on_gpu: bool = True) -> DevicePlan:
    """The device plan of a resolved ``cfg``; ``on_gpu``: the cluster has GPUs (False:
    the cpu plan whatever ``cluster.gpu_per_node`` says). Raises ``ConfigError``."""
    nodes, per_node = cfg.cluster.node_num, cfg.cluster.gpu_per_node
    if cfg.cluster.colocate:
        check_colocated_gpus(nodes, per_node)
    if per_node == 0 or not on_gpu:
        return DevicePlan("cpu", nodes, per_node)
    total = nodes * per_node
    explores = cfg.mode in ("both", "explore", "bench")
    trains = cfg.mode in ("both", "train")
    models = [(ROLLOUT, cfg.explorer.rollout_model)] if explores else []
    if explores:
        models += [(auxiliary_path(i), m) for i, m in enumerate(cfg.explorer.auxiliary_models)]
    if total == 1:
        return _colocated(cfg, models, trains)
    engine_gpus = sum(m.engine_num * m.tensor_parallel_size for _, m in models)
    budget = total - 1 if cfg.mode == "both" else total  # the trainer keeps at least one GPU
    if engine_gpus > budget:
        raise ConfigError(
            f"{ROLLOUT}.engine_num",
            f"rollout and auxiliary engines need {engine_gpus} GPUs but the cluster has {total}"
            + (" and the trainer needs at least one" if cfg.mode == "both" else ""),
            value=cfg.explorer.rollout_model.engine_num,
            valid=f"sum of engine_num * tensor_parallel_size <= {budget}",
        )
    free = [per_node] * nodes
    actors: list[ActorDevices] = []
    for path, model in models:
        size = model.tensor_parallel_size
        if size > per_node:
            raise ConfigError(
                f"{path}.tensor_parallel_size",
                f"an engine's GPUs must be on one node, and cluster.gpu_per_node is {per_node}",
                value=size,
                valid=f"at most {per_node}",
            )
        for i in range(model.engine_num):
            gpus = _take(free, per_node, size)
            if gpus is None:
                raise ConfigError(
                    f"{path}.engine_num",
                    f"engine {i} finds no node with {size} free GPUs "
                    f"(tensor_parallel_size {size} on nodes of {per_node})",
                    value=model.engine_num,
                    valid="engines whose GPUs fill each node without remainder",
                )
            engine = f"{'rollout' if path == ROLLOUT else _aux_name(path)} engine {i}"
            if path == ROLLOUT and i == 0:
                actors.append(ActorDevices("explorer", "explorer", size, gpus, (engine,)))
            else:
                actors.append(ActorDevices(engine, "engine", size, gpus, model=path, replica=i))
    if trains:
        actors += _trainer_ranks(cfg, free, per_node, total - sum(free))
    return DevicePlan("disjoint", nodes, per_node, tuple(actors))


def _aux_name(path: str) -> str:
    return "auxiliary model " + path.removeprefix("explorer.auxiliary_models[").rstrip("]")


def _take(free: list[int], per_node: int, size: int) -> tuple[int, ...] | None:
    """``size`` GPUs of the first node with that many free (taken from ``free``)."""
    for node, left in enumerate(free):
        if left >= size:
            first = node * per_node + per_node - left
            free[node] -= size
            return tuple(range(first, first + size))
    return None


def _trainer_ranks(cfg: Config, free: list[int], per_node: int, used: int) -> list[ActorDevices]:
    layout = trainer_layout(cfg, on_gpu=True)
    total = len(free) * per_node
    if layout.world_size > total - used:
        raise ConfigError(
            f"{_RANKS}.n_gpus_per_node",
            f"the trainer's {layout.nnodes} node(s) x {layout.per_node} ranks need "
            f"{layout.world_size} GPUs, and the engines leave {total - used} of {total}",
            value=layout.per_node,
            valid=f"nnodes x n_gpus_per_node <= {total - used}, or fewer engines",
        )
    ranks: list[ActorDevices] = []
    for _ in range(layout.nnodes):
        gpus = _take(free, per_node, layout.per_node)
        if gpus is None:
            raise ConfigError(
                f"{_RANKS}.nnodes",
                f"the trainer needs {layout.nnodes} node(s) with {layout.per_node} free GPUs "
                f"each, and the engines leave {free} free per node",
                value=layout.nnodes,
                valid=f"set {_RANKS}.nnodes and n_gpus_per_node to fit the free GPUs",
            )
        for g in gpus:
            ranks.append(ActorDevices(f"trainer rank {len(ranks)}", "trainer", 1, (g,)))
    return ranks


def _colocated(cfg: Config, models: list, trains: bool) -> DevicePlan:
    """One GPU: the explorer (every model's engine 0) and trainer rank 0 share it."""
    for path, model in models:
        for key in ("engine_num", "tensor_parallel_size"):
            value = getattr(model, key)
            if value != 1:
                raise ConfigError(
                    f"{path}.{key}",
                    "with one GPU (cluster.node_num x gpu_per_node = 1) the explorer and the "
                    "trainer share it, and no engine has GPUs of its own",
                    value=value,
                    valid="1, or more GPUs (cluster.gpu_per_node)",
                )
    actors = []
    if models:
        engines = ["rollout engine 0"] + [f"{_aux_name(p)} engine 0" for p, _ in models[1:]]
        actors.append(ActorDevices("explorer", "explorer", COLOCATED_SHARE, (0,), tuple(engines)))
    if trains:
        world = trainer_layout(cfg, on_gpu=True).world_size
        if world != 1:  # (check_trainer_ranks catches explicit layouts first)
            raise ConfigError(
                f"{_RANKS}.n_gpus_per_node",
                "with one GPU the trainer has one rank",
                value=world,
                valid="1",
            )
        actors.append(ActorDevices("trainer rank 0", "trainer", COLOCATED_SHARE, (0,)))
    return DevicePlan("colocate", 1, 1, tuple(actors))
