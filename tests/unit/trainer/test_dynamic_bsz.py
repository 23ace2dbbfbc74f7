"""Micro-batches packed by a token budget (``trainer.use_dynamic_bsz``).

Packing only changes how a batch is cut; every loss is normalised by the whole batch's
counts, so a packed split must give the loss and gradients of one row per micro-batch.
The rollouts of ``trainer_testing.rollouts(8)`` hold 4, 6, 10, 6, 7, 10, 5, 5 real
tokens (prompt + response).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from trainer_testing import make_config, rollouts

from trinity.config import ConfigError
from trinity.trainer import batch as batch_module
from trinity.trainer import distributed
from trinity.trainer.batch import collate, pack_by_tokens
from trinity.trainer.trainer import Trainer

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
LENGTHS = [4, 6, 10, 6, 7, 10, 5, 5]


def trainer_config(micro: int, max_tokens: int | None) -> dict:
    actor = {"ppo_micro_batch_size_per_gpu": micro, "grad_clip": 1.0}
    critic = {"ppo_micro_batch_size_per_gpu": micro}
    if max_tokens is not None:
        actor.update(use_dynamic_bsz=True, ppo_max_token_len_per_gpu=max_tokens)
        critic.update(ppo_max_token_len_per_gpu=max_tokens)
    return {"trainer_config": {"actor_rollout_ref": {"actor": actor}, "critic": critic}}


def build(
    model_dir: Path, tmp_path: Path, mode: str, micro: int, max_tokens: int | None
) -> Trainer:
    """GRPO with a KL loss (so a reference pass) and an entropy bonus."""
    cfg = make_config(
        model_dir,
        tmp_path,
        "grpo",
        algorithm={
            "loss_agg_mode": mode,
            "kl_loss_fn": "k2",
            "kl_loss_fn_args": {"kl_coef": 0.1},
            "entropy_loss_fn_args": {"entropy_coef": 0.01},
        },
        trainer=trainer_config(micro, max_tokens),
    )
    return Trainer(cfg, model_dir=model_dir, total_steps=1)


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_rollout_lengths_are_the_documented_ones() -> None:
    batch = collate(rollouts(8), pad_token_id=0)
    assert batch.lengths.tolist() == LENGTHS


def test_packing_fills_the_budget_in_order() -> None:
    # 4 + 6 = 10; 10; 6 (+ 7 would be 13); 7 + 5 (+ 10 would be 22)... in order
    assert pack_by_tokens(LENGTHS, 12) == [
        slice(0, 2),
        slice(2, 3),
        slice(3, 4),
        slice(4, 5),
        slice(5, 6),
        slice(6, 8),
    ]
    assert pack_by_tokens(LENGTHS, 100) == [slice(0, 8)]
    assert pack_by_tokens([], 10) == []


def test_a_row_over_the_budget_runs_alone_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    batch_module._WARNED_BUDGETS.discard(9)  # a fresh run, whatever ran before in this process
    with caplog.at_level(logging.WARNING, logger="trinity.trainer.batch"):
        runs = pack_by_tokens(LENGTHS, 9)
        pack_by_tokens(LENGTHS, 9)
    # rows 2 and 5 (10 tokens) exceed 9 and stand alone; 6 + 7 and 5 + 5 overflow too
    assert runs == [slice(i, i + 1) for i in range(8)]
    warnings = [r for r in caplog.records if "exceeds the micro-batch token budget 9" in r.message]
    assert len(warnings) == 1
    assert "10 tokens" in warnings[0].message


def test_pairs_stay_together_and_bad_budgets_are_refused() -> None:
    # pairs of 3 + 4 and 2 + 2 fit in 12 together; the third pair starts a new run
    assert pack_by_tokens([3, 4, 2, 2, 5, 1], 12, unit=2) == [slice(0, 4), slice(4, 6)]
    assert pack_by_tokens([3, 4, 2, 2], 6, unit=2) == [slice(0, 2), slice(2, 4)]
    with pytest.raises(ValueError, match="max_tokens must be at least 1"):
        pack_by_tokens(LENGTHS, 0)


def test_config_refuses_a_zero_token_budget(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="trainer.max_token_len_per_gpu: must be >= 1"):
        make_config(tiny_model_dir, tmp_path, trainer=trainer_config(1, 0))
    critic = {"trainer_config": {"critic": {"forward_max_token_len_per_gpu": 0}}}
    with pytest.raises(ConfigError, match="critic.forward_max_token_len_per_gpu: must be >= 1"):
        make_config(tiny_model_dir, tmp_path, trainer=critic)


@pytest.mark.parametrize("mode", MODES)
def test_packed_split_equals_one_row_per_micro_batch(
    tiny_model_dir: Path, tmp_path: Path, mode: str
) -> None:
    budget = 12
    trainer = build(tiny_model_dir, tmp_path, mode, micro=1, max_tokens=budget)
    assert trainer.max_tokens == budget and trainer.ref_max_tokens == budget
    experiences = rollouts(8)
    batch, _ = trainer.prepare(experiences)
    micros = distributed.micro_batches(batch, 1, 0, 1, budget)
    sizes = [int(m.lengths.sum()) for m, _ in micros]
    assert sizes == [10, 10, 6, 7, 10, 10] and max(sizes) <= budget
    assert [m.size for m, _ in micros] == [2, 1, 1, 1, 1, 2]
    m_packed = trainer.backward(batch)
    g_packed = grads(trainer.model)
    trainer.optimizer.zero_grad(set_to_none=True)

    # the same trainer, one row per micro-batch (the reference pass too)
    trainer.max_tokens = trainer.ref_max_tokens = None
    batch_single, _ = trainer.prepare(experiences)
    # a row's logprobs may differ by a rounding of float32 between batch shapes (the
    # matmul kernels block the rows differently on some CPUs)
    torch.testing.assert_close(batch.ref_logprobs, batch_single.ref_logprobs, rtol=1e-6, atol=1e-6)
    m_single = trainer.backward(batch_single)
    g_single = grads(trainer.model)
    assert m_single["loss"][1] == 8 and m_packed["loss"][1] == 6
    for key in ("loss", "pg_loss", "kl_loss", "entropy_loss"):
        assert m_packed[key][0] == pytest.approx(m_single[key][0], abs=1e-5), key
    assert g_packed.keys() == g_single.keys()
    worst = max(float((g_packed[k] - g_single[k]).abs().max()) for k in g_single)
    scale = max(float(g.abs().max()) for g in g_single.values())
    # within 1e-5 of the largest gradient entry (measured: about 1e-7 of it)
    assert worst < 1e-5 * scale and scale > 1e-5


def test_critic_packed_update_equals_one_row_per_micro_batch(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    results = []
    for max_tokens in (12, None):  # two trainers: the update steps the optimizer
        cfg = make_config(tiny_model_dir, tmp_path, "ppo", trainer=trainer_config(1, max_tokens))
        trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
        critic = trainer.critic
        assert critic.max_tokens == max_tokens
        batch, _ = trainer.prepare(rollouts(8))
        metrics = critic.update(batch, batch.rl_mask)
        results.append((metrics, {k: v.clone() for k, v in critic.model.state_dict().items()}))
    (m_packed, w_packed), (m_single, w_single) = results
    assert m_packed["critic/vf_loss"] == pytest.approx(m_single["critic/vf_loss"], abs=1e-5)
    assert m_packed["critic/grad_norm"] == pytest.approx(m_single["critic/grad_norm"], rel=1e-5)
    assert m_single["critic/grad_norm"] > 1e-3
    worst = max(float((w_packed[k] - w_single[k]).abs().max()) for k in w_single)
    assert worst < 1e-6


def _rank_micro_batches(rank: int, port: int, out: str) -> None:
    """One rank of a two-process gloo group: writes its micro-batches as JSON."""
    import json

    info = distributed.RankInfo(rank, 2, "127.0.0.1", port)
    distributed.init_process_group(info, timeout_s=60)
    batch = collate(rollouts(7), pad_token_id=0)  # rank 0: rows 0-3, rank 1: rows 4-6
    plans = {}
    for name, micro, budget in (("packed", 1, 22), ("fixed", 3, None)):
        micros = distributed.micro_batches(batch, micro, rank, 2, budget)
        plans[name] = [[int(m.lengths.sum()), pad] for m, pad in micros]
    Path(out, f"rank_{rank}.json").write_text(json.dumps(plans))
    distributed.shutdown()


def test_ranks_agree_on_the_number_of_packed_micro_batches(tmp_path: Path) -> None:
    """Two real processes: packed counts differ per rank and the shorter list is padded."""
    import json

    import torch.multiprocessing as mp

    # the ranks meet at a store this process hosts, on a port it already holds
    store, info = distributed.host_rendezvous("127.0.0.1", 2, timeout_s=60)
    mp.spawn(_rank_micro_batches, args=(info.master_port, str(tmp_path)), nprocs=2)
    del store
    rank0, rank1 = (json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in (0, 1))
    # rank 0 holds 4 + 6 + 10 and 6 tokens: two runs; rank 1's 7 + 10 + 5 fit in one
    assert rank0["packed"] == [[20, False], [6, False]]
    assert rank1["packed"] == [[22, False], [4, True]]  # the filler repeats row 0
    # fixed size 3: rank 0's 4 rows need two micro-batches, rank 1's 3 rows one
    assert [pad for _, pad in rank0["fixed"]] == [False, False]
    assert [pad for _, pad in rank1["fixed"]] == [False, True]
