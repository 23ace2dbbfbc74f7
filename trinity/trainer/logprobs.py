"""Log-probs of a batch without gradient, over the trainer's ranks: the reference
model's, and the policy's own when rollout correction recomputes the old log-probs.
Each row's at its rollout's temperature (``TrainBatch.temperatures``), so that both sides
of a ratio or a KL term divide that row's logits by the same T."""

from __future__ import annotations

import torch

from trinity.trainer import distributed
from trinity.trainer.actor import forward_logprobs
from trinity.trainer.batch import TrainBatch


def batch_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    micro_size: int,
    max_tokens: int | None,
    *,
    compute_dtype: torch.dtype | None,
    rank: int = 0,
    world_size: int = 1,
    balance: bool = False,
    every_row: bool = False,
    device: torch.device | None = None,
) -> torch.Tensor:
    """(B, R) log-probs of ``model``, in micro-batches of ``micro_size`` rows (or packed
    to ``max_tokens``). With several ranks each computes its rows
    (``distributed.rows_of_rank``) and the ranks exchange them; ``every_row``: this rank
    computes every row (the sharded policy, whose forward passes every rank must join).
    ``device``: the model's (None: the batch's); each micro-batch goes there and its
    log-probs come back to the batch's device."""
    if every_row or world_size == 1:
        return _forward(model, batch, micro_size, max_tokens, compute_dtype, device)
    rows = distributed.rows_of_rank(batch, rank, world_size, balance)
    part = batch.select(rows)
    local = batch.old_logprobs[rows]
    if part.size:
        local = _forward(model, part, micro_size, max_tokens, compute_dtype, device)
    return distributed.all_reduce_rows(batch.old_logprobs, rows, local)


def _forward(
    model: torch.nn.Module,
    batch: TrainBatch,
    micro_size: int,
    max_tokens: int | None,
    compute_dtype: torch.dtype | None,
    device: torch.device | None = None,
) -> torch.Tensor:
    micros = batch.split(micro_size, max_tokens)
    home = batch.old_logprobs.device
    return torch.cat(
        [
            forward_logprobs(
                model,
                m if device is None else m.to(device),
                compute_dtype=compute_dtype,
            )[0].to(home)
            for m in micros
        ]
    )
