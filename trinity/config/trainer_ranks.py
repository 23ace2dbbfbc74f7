"""How many trainer ranks a run has, and where they go.

The trainer's world size is ``nnodes x n_gpus_per_node`` of
``trainer.trainer_config.trainer`` (the veRL names):

- set explicitly, they are used as written: ``nnodes`` nodes with ``n_gpus_per_node``
  ranks each. On a GPU cluster each rank owns one GPU; on CPU a rank is a process that
  uses every core of its node, so two ranks on one node take turns for the cores;
- unset on a GPU cluster, the trainer gets the GPUs the explorer leaves
  (``node_num x gpu_per_node`` minus the rollout and auxiliary engines' GPUs);
- unset on CPU, the trainer is one rank.

The ranks of one node are packed together; different nodes hold different ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

from trinity.config.errors import ConfigError
from trinity.config.schema import Config

_PATH = "trainer.trainer_config.trainer"


@dataclass(frozen=True)
class RankLayout:
    nnodes: int
    per_node: int

    @property
    def world_size(self) -> int:
        return self.nnodes * self.per_node


def trainer_layout(cfg: Config, *, on_gpu: bool) -> RankLayout:
    """The trainer ranks of a resolved ``cfg``; ``on_gpu``: the cluster has GPUs to use."""
    loop = cfg.trainer.trainer_config.trainer
    if loop.nnodes is not None or loop.n_gpus_per_node is not None:
        return RankLayout(loop.nnodes or 1, loop.n_gpus_per_node or 1)
    per_node = cfg.cluster.gpu_per_node
    if not on_gpu or per_node == 0:
        return RankLayout(1, 1)
    total = cfg.cluster.node_num * per_node
    if cfg.mode != "train":
        engines = [cfg.explorer.rollout_model, *cfg.explorer.auxiliary_models]
        total -= sum(e.engine_num * e.tensor_parallel_size for e in engines)
    total = max(1, total)
    if total <= per_node:
        return RankLayout(1, total)
    if total % per_node:
        raise ConfigError(
            f"{_PATH}.nnodes",
            f"the {total} GPUs left for the trainer do not fill whole nodes of "
            f"cluster.gpu_per_node {per_node}",
            valid=f"set {_PATH}.nnodes and {_PATH}.n_gpus_per_node explicitly",
        )
    return RankLayout(total // per_node, per_node)


def check_trainer_ranks(cfg: Config) -> None:
    """Explicit rank settings must be positive and fit the cluster."""
    if cfg.trainer.trainer_config is None:
        return
    loop = cfg.trainer.trainer_config.trainer
    for name in ("nnodes", "n_gpus_per_node"):
        value = getattr(loop, name)
        if value is not None and value < 1:
            raise ConfigError(
                f"{_PATH}.{name}",
                "must be at least 1",
                value=value,
                valid="an integer >= 1, or unset",
            )
    if loop.nnodes is not None and loop.nnodes > cfg.cluster.node_num:
        raise ConfigError(
            f"{_PATH}.nnodes",
            f"asks for more nodes than cluster.node_num ({cfg.cluster.node_num})",
            value=loop.nnodes,
            valid=f"at most {cfg.cluster.node_num}, or raise cluster.node_num",
        )
    gpus = cfg.cluster.gpu_per_node
    if gpus and loop.n_gpus_per_node is not None and loop.n_gpus_per_node > gpus:
        raise ConfigError(
            f"{_PATH}.n_gpus_per_node",
            f"asks for more GPUs per node than cluster.gpu_per_node ({gpus})",
            value=loop.n_gpus_per_node,
            valid=f"at most {gpus}",
        )
    explicit = loop.nnodes is not None or loop.n_gpus_per_node is not None
    check_data_parallel(
        cfg, trainer_layout(cfg, on_gpu=bool(gpus)) if explicit else RankLayout(1, 1)
    )


def check_data_parallel(cfg: Config, layout: RankLayout) -> None:
    """The critic and LoRA have no data-parallel path yet: they need a one-rank trainer."""
    loop = cfg.trainer.trainer_config.trainer
    world = layout.world_size
    one_rank_only = [
        name
        for name, used in (
            ("a critic (algorithm.use_critic)", cfg.algorithm.use_critic),
            ("LoRA (model.lora_configs)", bool(getattr(cfg.model, "lora_configs", None))),
        )
        if used
    ]
    if world > 1 and one_rank_only:
        raise ConfigError(
            f"{_PATH}.n_gpus_per_node",
            f"{' and '.join(one_rank_only)} train(s) on one rank only, but the trainer has {world} "
            f"({layout.nnodes} node(s) x {layout.per_node})",
            value=loop.n_gpus_per_node,
            valid="1 trainer rank (nnodes: 1, n_gpus_per_node: 1)",
        )
