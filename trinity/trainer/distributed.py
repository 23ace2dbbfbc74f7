"""Data parallelism of the trainer: N ranks, each a process, the model sharded by FSDP2.

Every rank receives the whole train batch and collates it the same way, so all ranks
agree on shapes, group statistics and the ``LossNormalizer`` (counts of the whole
batch). Each rank runs the forward and backward of its own rows (``rank_rows``); the
gradients of the rows are summed across ranks (FSDP's reduce-scatter with a divide
factor of 1), which gives the gradient of the whole batch, as one rank would compute it.

Which rows a rank takes: with ``trainer.balance_batch`` (the default) the rows are dealt
out so every rank gets about the same number of tokens (``balanced_partition``), else in
contiguous runs of equal row count (``rank_rows``). Either way the row counts differ by at
most one, and the loss normalisation (whole-batch counts) makes the gradient the same.

FSDP runs a collective in every forward and backward, so all ranks must run the same
number of micro-batches. A rank with fewer rows (or, when micro-batches are packed by a
token budget, fewer micro-batches) pads its list with ``padding`` micro-batches whose
loss is multiplied by 0: they take part in the collectives and add nothing to the
gradient.

Backend: nccl for CUDA tensors, with gloo for CPU ones, when CUDA is available (one rank
per GPU: Ray gives each rank actor its own device), else gloo (CPU). Tensors a collective of this module sends are on the
backend's device (:func:`collective_device`). On CUDA, ``fsdp_config.param_offload`` or
``optimizer_offload`` shards with FSDP2's ``CPUOffloadPolicy``: the parameter shards, their
gradients and the optimizer state live in host memory, each unit is gathered onto the GPU
for its forward and backward, and the optimizer steps on the CPU.
"""

from __future__ import annotations

import datetime
import math
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trinity.config.trainer_settings import Offload
from trinity.trainer.batch import TrainBatch


@dataclass(frozen=True)
class RankInfo:
    """This process's place in the trainer group and where the group meets."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int


def backend() -> str:
    """nccl for CUDA tensors with gloo beside it for CPU ones (FSDP's CPU offload reduces
    CPU gradient norms; object collectives), or gloo alone without CUDA."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def collective_device() -> torch.device:
    """Where this module puts the tensors of the default group's collectives: this
    rank's GPU when the group has nccl, the CPU with gloo alone (or without a group)."""
    if dist.is_initialized() and "nccl" in str(dist.get_backend()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def host_rendezvous(
    host: str, world_size: int, timeout_s: float = 1800
) -> tuple[dist.TCPStore, RankInfo]:
    """The group's meeting point, hosted by rank 0: a ``TCPStore`` listening on a port
    the OS picked (port 0), and rank 0's ``RankInfo`` naming that port for the others.

    The port is bound before anyone hears of it, so no other process can take it between
    its choice and its use (as it could when a free port was looked up, released and
    bound again by the store). Pass the store to rank 0's :func:`init_process_group`.
    """
    store = dist.TCPStore(
        host,
        0,
        world_size,
        is_master=True,
        wait_for_workers=False,  # they learn the port from the RankInfo returned here
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return store, RankInfo(0, world_size, host, store.port)


def start_group(
    host: str,
    world_size: int,
    start_others: Callable[[RankInfo], None],
    timeout_s: float = 1800,
) -> RankInfo:
    """Rank 0's side of forming the group: host the rendezvous, hand its ``RankInfo``
    to ``start_others`` (which starts ranks 1..N-1 with it, without waiting for them),
    then join; returns once every rank has joined."""
    store, info = host_rendezvous(host, world_size, timeout_s)
    start_others(info)
    init_process_group(info, store, timeout_s)
    return info


def init_process_group(
    info: RankInfo, store: dist.Store | None = None, timeout_s: float = 1800
) -> None:
    """Join the trainer group at ``info``'s rendezvous; returns once all ``world_size``
    ranks have joined. Rank 0 passes the store of :func:`host_rendezvous`."""
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    timeout = datetime.timedelta(seconds=timeout_s)
    if store is None:
        store = dist.TCPStore(
            info.master_addr, info.master_port, info.world_size, is_master=False, timeout=timeout
        )
    dist.init_process_group(
        backend(), store=store, rank=info.rank, world_size=info.world_size, timeout=timeout
    )


def shutdown() -> None:
    """Leave the trainer group.

    All ranks meet at a barrier first, so no rank tears its side down while another
    still has a collective in flight. ``destroy_process_group`` is then skipped on
    purpose: with gloo it can abort the process when the peers' sockets close in a
    different order, and the rank processes end right after this anyway (the OS
    closes the sockets).
    """
    if dist.is_initialized():
        dist.barrier()


def shard_model(model: torch.nn.Module, offload: bool = False) -> None:
    """Shard ``model`` in place with FSDP2: each decoder layer is one unit, the rest
    (embeddings, tied head, final norm) the root unit. ``offload`` (CUDA only): the
    shards live in host memory (``CPUOffloadPolicy``), gathered onto the GPU per unit."""
    from torch.distributed.fsdp import fully_shard

    options = {}
    if offload:
        from torch.distributed.fsdp import CPUOffloadPolicy

        options["offload_policy"] = CPUOffloadPolicy()
    layers = getattr(getattr(model, "model", None), "layers", None)
    for layer in layers or []:
        fully_shard(layer, **options)
    fully_shard(model, **options)


def offloads(offload: Offload, device: torch.device) -> bool:
    """Whether ``offload`` (a model's ``fsdp_config`` offload switches) offloads
    to host memory here: ``param_offload`` or ``optimizer_offload`` on a CUDA device (FSDP2
    keeps parameters, gradients and optimizer state together: one switch for both). On
    the CPU both are without effect."""
    wanted = bool(offload.param_offload or offload.optimizer_offload)
    return wanted and device.type == "cuda"


def rank_rows(size: int, rank: int, world_size: int) -> slice:
    """The contiguous rows of a batch of ``size`` that ``rank`` trains on.

    Sizes differ by at most one; the first ``size % world_size`` ranks hold one more.
    """
    base, extra = divmod(size, world_size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


def balanced_partition(tokens: Sequence[int], world_size: int) -> list[list[int]]:
    """Indices of ``tokens`` per rank, so each rank's token sum is about the same.

    Each rank gets as many items as ``rank_rows`` gives it (the first ``len % world_size``
    ranks one more), so the micro-batch count of fixed-size splitting still holds. Greedy:
    the longest item first, each to the rank with the fewest tokens that still has room.
    Each rank's indices are in ascending order, so rows that were neighbours (rollouts of
    one prompt, which the shared-prompt forward batches) stay in order.

    >>> balanced_partition([9, 9, 1, 1], 2)  # by row count: 18 and 2 tokens
    [[0, 2], [1, 3]]
    """
    room = [rank_rows(len(tokens), r, world_size) for r in range(world_size)]
    room_left = [s.stop - s.start for s in room]
    sums = [0] * world_size
    parts: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(range(len(tokens)), key=lambda i: (-tokens[i], i)):
        rank = min((r for r in range(world_size) if room_left[r]), key=lambda r: (sums[r], r))
        parts[rank].append(i)
        sums[rank] += tokens[i]
        room_left[rank] -= 1
    return [sorted(part) for part in parts]


def rows_of_rank(
    batch: TrainBatch, rank: int, world_size: int, balance: bool = False
) -> slice | torch.Tensor:
    """The rows of ``batch`` that ``rank`` computes: contiguous (``rank_rows``), or with
    ``balance`` the rows ``balanced_partition`` deals it by token count. DPO pairs
    (``paired``) stay together; every rank computes the same answer without talking."""
    unit = 2 if batch.paired else 1
    units = batch.size // unit
    if not balance or world_size == 1:
        rows = rank_rows(units, rank, world_size)
        return slice(rows.start * unit, rows.stop * unit)
    tokens = batch.lengths.view(units, unit).sum(dim=1).tolist()
    mine = balanced_partition(tokens, world_size)[rank]
    return torch.tensor([u * unit + k for u in mine for k in range(unit)], dtype=torch.long)


def micro_batches(
    batch: TrainBatch,
    micro_size: int,
    rank: int,
    world_size: int,
    max_tokens: int | None = None,
    balance: bool = False,
) -> list[tuple[TrainBatch, bool]]:
    """This rank's micro-batches of ``batch`` as (micro, is_padding) pairs.

    The rank's rows are ``rows_of_rank(batch, rank, world_size, balance)``, cut into
    ``micro_size`` rows each, or with ``max_tokens`` packed to that many tokens
    (``TrainBatch.micro_slices``). Every rank gets the same number: with fixed sizes
    enough for the largest rank's rows; packed counts depend on each rank's lengths, so
    the ranks agree on the largest count (a collective). Padding micro-batches repeat
    the batch's first row (pair); their loss must be multiplied by 0. Paired batches
    (chosen, rejected) are cut between pairs only.
    """
    unit = 2 if batch.paired else 1
    units = batch.size // unit
    mine = batch.select(rows_of_rank(batch, rank, world_size, balance))
    real = mine.split(micro_size, max_tokens) if mine.size else []
    if max_tokens is None:
        micro_rows = math.ceil(micro_size / unit) * unit
        largest = math.ceil(units / world_size) * unit
        count = max(1, math.ceil(largest / micro_rows))
    else:
        count = max(1, len(real))
        if world_size > 1:
            agreed = torch.tensor([count], dtype=torch.long, device=collective_device())
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
            count = int(agreed)
    padding = batch.select(slice(0, unit))
    return [(m, False) for m in real] + [(padding, True)] * (count - len(real))


def write_turns(save_strategy: str, nodes: Sequence[str]) -> list[int]:
    """The turn in which each rank writes its checkpoint shards (``trainer.save_strategy``).

    ``nodes[r]`` names rank r's node. Ranks of one turn write at the same time; turn
    t + 1 starts once every writer of turn t is done. Each rank writes from a single
    thread of its own process, so ``single_thread`` and ``single_process`` both mean one
    rank at a time, in rank order; ``single_node``: the nodes take turns (in the order
    of their first rank) and the ranks of a node write together; ``unrestricted``: all
    ranks at once.

    >>> write_turns("single_node", ["a", "a", "b", "b"])
    [0, 0, 1, 1]
    """
    if save_strategy == "unrestricted":
        return [0] * len(nodes)
    if save_strategy in ("single_thread", "single_process"):
        return list(range(len(nodes)))
    if save_strategy == "single_node":
        order = list(dict.fromkeys(nodes))
        return [order.index(node) for node in nodes]
    raise ValueError(
        f"unknown trainer.save_strategy {save_strategy!r}; valid: single_thread, "
        "single_process, single_node, unrestricted"
    )


def node_name() -> str:
    """This process's node: the Ray node id inside a Ray worker, else the host name."""
    try:
        import ray

        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return socket.gethostname()


def in_turns(save_strategy: str, write: Callable[[], None]) -> tuple[int, int]:
    """Run ``write`` on every rank in the turns of ``write_turns`` (collectives: every
    rank calls this); returns (this rank's turn, the number of turns)."""
    nodes: list[str] = [""] * dist.get_world_size()
    dist.all_gather_object(nodes, node_name())
    turns = write_turns(save_strategy, nodes)
    mine = turns[dist.get_rank()]
    for turn in range(max(turns) + 1):
        if turn == mine:
            write()
        dist.barrier()
    return mine, max(turns) + 1


def all_reduce_rows(
    full: torch.Tensor, rows: slice | torch.Tensor, local: torch.Tensor
) -> torch.Tensor:
    """(B, ...) tensor of every rank's rows: each rank computed ``local`` for ``rows``."""
    home = full.device
    full = torch.zeros_like(full, device=collective_device())
    if isinstance(rows, torch.Tensor):
        rows = rows.to(full.device)
    full[rows] = local.to(full.device)
    # adding exact zeros to each row leaves every row bit-identical to its rank's result
    dist.all_reduce(full, op=dist.ReduceOp.SUM)
    return full.to(home)


def gather_metrics(totals: dict[str, tuple[float, int]]) -> dict[str, tuple[float, int]]:
    """Per metric (sum, count), added up over the ranks."""
    gathered: list[dict[str, tuple[float, int]]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, totals)
    merged: dict[str, tuple[float, int]] = {}
    for part in gathered:
        for key, (total, count) in part.items():
            old_total, old_count = merged.get(key, (0.0, 0))
            merged[key] = (old_total + total, old_count + count)
    return merged


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded parameters (a collective: every rank must call it)."""
    from torch.distributed.tensor import DTensor

    return {
        k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in model.state_dict().items()
    }


def to_local(value):
    """``value`` (a state dict, possibly nested) with every DTensor replaced by its shard."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        return value.to_local().clone()
    if isinstance(value, dict):
        return {k: to_local(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_local(v) for v in value]
    return value


def load_model_state(model: torch.nn.Module, state: dict[str, torch.Tensor], full: bool) -> None:
    """Copy ``state`` into the sharded parameters: this rank's saved shards, or with
    ``full`` the unsharded weights, of which each rank keeps its part (a collective:
    every rank calls it with the same weights)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    params = model.state_dict()
    missing = sorted(set(params) - set(state))
    if missing:
        raise KeyError(f"the {'full weights' if full else 'rank shard'} lack {missing[:5]}")
    with torch.no_grad():
        for name, target in params.items():
            value = state[name]
            if isinstance(target, DTensor):
                if full:
                    value = distribute_tensor(
                        value.to(target.dtype), target.device_mesh, target.placements
                    ).to_local()
                target = target.to_local()
            target.copy_(value)


def load_local_optimizer_state(
    optimizer: torch.optim.Optimizer, model: torch.nn.Module, state: dict
) -> None:
    """Load an optimizer state saved by ``to_local`` and turn its per-parameter tensors
    back into DTensors placed like their parameters."""
    from torch.distributed.tensor import DTensor

    optimizer.load_state_dict(state)
    for param in model.parameters():
        if not isinstance(param, DTensor):
            continue
        for key, value in optimizer.state.get(param, {}).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, DTensor) and value.dim():
                optimizer.state[param][key] = DTensor.from_local(
                    value,
                    param.device_mesh,
                    param.placements,
                    shape=param.shape,
                    stride=param.stride(),
                )
