"""``trainer.balance_batch``: data-parallel ranks get rows by token count, not row count."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from trainer_testing import make_config

from trinity.trainer import distributed
from trinity.trainer.batch import TrainBatch, collate
from trinity.trainer.trainer import Trainer
from trinity.types import EID, Experience

# long responses first: contiguous halves hold 2 * 3 + 26 and 2 * 3 + 4 response tokens
RESPONSES = [7, 7, 6, 6, 1, 1, 1, 1]


def skewed(responses: list[int] = RESPONSES, rejected: bool = False) -> list[Experience]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for i, length in enumerate(responses):
        tokens = torch.randint(0, 1000, (3 + length,), generator=gen)
        out.append(
            Experience(
                tokens=tokens,
                prompt_length=3,
                logprobs=-torch.rand(length, generator=gen),
                reward=float(i % 2),
                eid=EID(batch=0, task=i // 4, run=i % 4),
                rejected=torch.randint(0, 1000, (length,), generator=gen) if rejected else None,
            )
        )
    return out


def rank_tokens(batch: TrainBatch, world: int, balance: bool) -> tuple[list[int], list[int]]:
    """(tokens per rank, every row index the ranks took, sorted)."""
    tokens, taken = [], []
    for rank in range(world):
        rows = distributed.rows_of_rank(batch, rank, world, balance)
        index = torch.arange(batch.size)[rows]
        tokens.append(int(batch.lengths[index].sum()))
        taken += index.tolist()
    return tokens, sorted(taken)


@pytest.mark.parametrize("world", [2, 3])
def test_balanced_ranks_hold_closer_token_counts_and_every_row_once(world: int) -> None:
    batch = collate(skewed(), pad_token_id=0)
    plain, plain_rows = rank_tokens(batch, world, balance=False)
    balanced, balanced_rows = rank_tokens(batch, world, balance=True)
    assert plain_rows == balanced_rows == list(range(batch.size))
    assert max(balanced) - min(balanced) < max(plain) - min(plain)
    # 2 ranks: 38 and 16 tokens by row count; (10 + 9 + 4 + 4) = 27 each balanced
    if world == 2:
        assert plain == [38, 16] and balanced == [27, 27]


def test_balanced_ranks_keep_row_counts_and_order() -> None:
    batch = collate(skewed(), pad_token_id=0)
    for rank in range(3):
        rows = distributed.rows_of_rank(batch, rank, 3, balance=True)
        plain = distributed.rank_rows(batch.size, rank, 3)
        assert rows.numel() == plain.stop - plain.start  # 3, 3, 2 rows
        assert rows.tolist() == sorted(rows.tolist())


def test_dpo_pairs_stay_together_on_one_rank() -> None:
    batch = collate(skewed(rejected=True), pad_token_id=0)  # rows 2k, 2k + 1 are a pair
    assert batch.paired and batch.size == 16
    for rank in range(2):
        rows = distributed.rows_of_rank(batch, rank, 2, balance=True).tolist()
        assert rows[0::2] == [r - 1 for r in rows[1::2]] and all(r % 2 == 0 for r in rows[0::2])
    _, taken = rank_tokens(batch, 2, balance=True)
    assert taken == list(range(16))


def test_balanced_partition_of_one_rank_is_everything() -> None:
    assert distributed.balanced_partition([5, 1, 3], 1) == [[0, 1, 2]]


def _gradient(trainer: Trainer, batch: TrainBatch, world: int, balance: bool) -> dict:
    """The gradient the ranks of a ``world``-rank trainer accumulate, summed over them
    (every rank's ``backward`` on one unsharded model), divided by ``world``: each rank
    scales its loss by ``world`` for FSDP's average."""
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.balance_batch, trainer.world_size = balance, world
    for rank in range(world):
        trainer.rank = rank
        trainer.backward(batch)
    trainer.rank, trainer.world_size = 0, 1
    return {
        n: p.grad.detach().clone() / world
        for n, p in trainer.model.named_parameters()
        if p.grad is not None
    }


def test_the_gradient_of_the_whole_batch_does_not_depend_on_the_split(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "grpo",
        algorithm={"entropy_loss_fn_args": {"entropy_coef": 0.01}},
        trainer={
            "trainer_config": {"actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 2}}}
        },
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    assert trainer.balance_batch  # veRL's default
    batch, _ = trainer.prepare(skewed())
    # a one-process group: the ranks' metrics are gathered through it
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        plain = _gradient(trainer, batch, 2, balance=False)
        balanced = _gradient(trainer, batch, 2, balance=True)
    finally:
        dist.destroy_process_group()
    scale = max(float(g.abs().max()) for g in plain.values())
    assert scale > 1e-4 and balanced.keys() == plain.keys()
    worst = max(float((balanced[k] - plain[k]).abs().max()) for k in plain)
    assert worst < 1e-5 * scale
