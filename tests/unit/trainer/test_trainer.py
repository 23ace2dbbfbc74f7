"""The Trainer on every algorithm type, its input per type, and the exported weights."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from trainer_testing import changed, make_config, parameters, rollouts

from trinity.buffer import ExperienceQueue
from trinity.trainer.train_input import TrainInput, TrainInputError, dataset_steps
from trinity.trainer.trainer import Trainer, TrainerSetupError, policy_loss_args

RL_TYPES = ["ppo", "grpo", "opmd", "rloo", "reinforceplusplus", "gspo"]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sft_rows(n: int) -> list[dict]:
    return [{"prompt": f"What is {i} + 1?", "response": f"{i} + 1 = {i + 1}."} for i in range(n)]


def assert_finite(metrics: dict[str, float]) -> None:
    bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
    assert not bad, bad


@pytest.mark.parametrize("algorithm_type", RL_TYPES)
def test_rl_types_update_the_policy(
    tiny_model_dir: Path, tmp_path: Path, algorithm_type: str
) -> None:
    cfg = make_config(tiny_model_dir, tmp_path, algorithm_type)
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    assert (trainer.critic is not None) == (algorithm_type == "ppo")
    before = parameters(trainer.model)
    for _ in range(2):
        metrics = trainer.train_step(rollouts(8))
    assert_finite(metrics)
    assert changed(before, trainer.model)
    assert "actor/pg_loss" in metrics and "critic/advantages/mean" in metrics
    assert trainer.global_step == 2


def test_sft_trains_on_its_dataset(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "sft", sft_rows(6))
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "sft",
        mode="train",
        buffer={
            "train_batch_size": 4,
            "trainer_input": {"experience_buffer": {"name": "sft", "path": str(data)}},
        },
    )
    assert cfg.algorithm.use_reference is False
    assert dataset_steps(cfg) == 2  # 6 rows in batches of 4
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    assert trainer.ref_model is None and trainer.advantage_fn is None
    train_input = TrainInput(cfg, trainer.tokenizer)
    losses = []
    batches = []
    while batch := train_input.next_batch(trainer.global_step):
        batches.append(len(batch))
        losses.append(trainer.train_step(batch)["actor/sft_loss"])
    assert batches == [4, 2]
    # the same six rows again: their likelihood went up (lr 1e-3 on a tiny model)
    again = TrainInput(cfg, trainer.tokenizer).next_batch(0)
    prepared, _ = trainer.prepare(again)
    assert all(math.isfinite(x) for x in losses)
    assert trainer.train_step(again)["actor/sft_loss"] < losses[0]
    assert prepared.advantages is None


def test_dpo_trains_on_pairs(tiny_model_dir: Path, tmp_path: Path) -> None:
    rows = [{"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(4)]
    data = write_jsonl(tmp_path / "dpo", rows)
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "dpo",
        mode="train",
        algorithm={"policy_loss_fn_args": {"beta": 0.5}},
        buffer={
            "batch_size": 2,
            "trainer_input": {"experience_buffer": {"name": "dpo", "path": str(data)}},
        },
        trainer={
            "trainer_config": {"actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 1}}}
        },
    )
    assert cfg.buffer.train_batch_size == 4  # 2 pairs x 2 sequences
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    assert trainer.ref_model is not None
    train_input = TrainInput(cfg, trainer.tokenizer)
    first = train_input.next_batch(0)
    assert len(first) == 2 and all(e.rejected is not None for e in first)
    # at the start the policy is the reference: every implicit reward is 0, loss log 2
    metrics = trainer.train_step(first)
    assert metrics["actor/dpo_loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert metrics["batch/size"] == 4
    for _ in range(3):
        metrics = trainer.train_step(first)
    assert metrics["actor/dpo_loss"] < math.log(2)
    assert metrics["actor/reward_margin"] > 0


def test_mix_adds_expert_rows_to_the_rollouts(tiny_model_dir: Path, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "sft", sft_rows(5))
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "mix",
        algorithm={
            "sample_strategy_args": {"expert_data_ratio": 0.25},
            "policy_loss_fn_args": {"mu": 0.5},
        },
    )
    assert cfg.algorithm.sample_strategy == "mix"
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    # train_batch_size counts the expert rows: 11 rows, ceil(0.25 x 11) = 3 of them expert,
    # so a step reads the 8 rollouts of one explore step (batch_size 2 x repeat_times 4)
    assert cfg.buffer.train_batch_size == 11
    queue = ExperienceQueue(capacity=100)
    queue.put(rollouts(12))
    train_input = TrainInput(cfg, trainer.tokenizer, lambda n: queue.get(n, timeout=0))
    batch = train_input.next_batch(0)
    assert len(batch) == 11
    assert [bool(e.info.get("is_expert")) for e in batch] == [False] * 8 + [True] * 3
    assert queue.qsize() == 4
    prepared, _ = trainer.prepare(batch)
    # expert rows get no advantage; the rollouts' GRPO advantages ignore them
    assert torch.count_nonzero(prepared.advantages[8:]) == 0
    before = parameters(trainer.model)
    metrics = trainer.train_step(batch)
    assert_finite(metrics)
    assert metrics["batch/expert_size"] == 3
    assert metrics["actor/sft_loss"] > 0 and "actor/pg_loss" in metrics
    assert changed(before, trainer.model)


def test_mix_train_batch_of_five_reads_the_four_rollouts_of_an_explore_step(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    write_jsonl(tmp_path / "sft", sft_rows(5))
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "mix",
        algorithm={"sample_strategy_args": {"expert_data_ratio": 0.2}},
        buffer={"batch_size": 1, "train_batch_size": 5},
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    queue = ExperienceQueue(capacity=100)
    train_input = TrainInput(cfg, trainer.tokenizer, lambda n: queue.get(n, timeout=0))
    for step in (1, 2):  # each explore step writes 4 rollouts; each train step takes them
        queue.put(rollouts(4, seed=step))
        batch = train_input.next_batch(step - 1)
        assert [bool(e.info.get("is_expert")) for e in batch] == [False] * 4 + [True]
        assert queue.qsize() == 0
        metrics = trainer.train_step(batch)
        assert metrics["batch/expert_size"] == 1 and metrics["batch/size"] == 5


def test_train_input_of_rollouts_applies_the_sample_strategy(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "grpo",
        algorithm={
            "sample_strategy": "staleness_limit",
            "sample_strategy_args": {"max_staleness": 0},
        },
    )
    queue = ExperienceQueue(capacity=100)
    fresh, stale = rollouts(4), rollouts(4)
    for e in fresh:
        e.info["model_version"] = 3
    queue.put(stale + fresh)
    train_input = TrainInput(cfg, None, lambda n: queue.get(n, timeout=0))
    assert train_input.next_batch(model_version=3) == fresh  # version-0 rows are dropped
    assert train_input.next_batch(model_version=3) == []  # the buffer is empty


def test_train_input_errors(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = make_config(tiny_model_dir, tmp_path, "grpo")
    with pytest.raises(TrainInputError, match="trains on rollouts"):
        TrainInput(cfg, None)
    odd = make_config(
        tiny_model_dir,
        tmp_path,
        "dpo",
        mode="train",
        buffer={
            "train_batch_size": 3,
            "trainer_input": {"experience_buffer": {"name": "d", "path": "/x"}},
        },
    )
    with pytest.raises(TrainInputError, match="must be even"):
        TrainInput(odd, None)


def test_algorithm_loss_agg_mode_reaches_the_policy_loss(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = make_config(
        tiny_model_dir, tmp_path, "grpo", algorithm={"loss_agg_mode": "seq-mean-token-sum"}
    )
    assert policy_loss_args(cfg.algorithm)["loss_agg_mode"] == "seq-mean-token-sum"
    # the loss's own argument wins
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "gspo",
        algorithm={
            "loss_agg_mode": "token-mean",
            "policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-mean"},
        },
    )
    assert (
        Trainer(cfg, model_dir=tiny_model_dir, total_steps=1).policy_loss.args.loss_agg_mode
        == "seq-mean-token-mean"
    )


def test_parts_that_need_a_missing_model_fail_at_setup(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = make_config(
        tiny_model_dir, tmp_path, "grpo", algorithm={"kl_loss_fn": "k3", "use_reference": False}
    )
    with pytest.raises(TrainerSetupError, match="kl_loss_fn 'k3'.*use_reference"):
        Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    cfg = make_config(tiny_model_dir, tmp_path, "ppo", algorithm={"use_critic": False})
    with pytest.raises(TrainerSetupError, match="advantage_fn 'ppo'.*use_critic"):
        Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)


def test_export_hf_loads_back_as_the_trained_policy(tiny_model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    cfg = make_config(tiny_model_dir, tmp_path, "grpo", algorithm={"kl_loss_fn": "none"})
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    trainer.train_step(rollouts(8))
    trainer.save_checkpoint(tmp_path / "job", 1)
    directory = trainer.export_hf(tmp_path / "job", 1)
    assert directory == tmp_path / "job/global_step_1/actor/huggingface"
    loaded = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    trained = trainer.model.state_dict()
    for key, value in loaded.state_dict().items():
        assert torch.equal(value, trained[key]), key
    assert (directory / "tokenizer_config.json").exists()


def test_mix_sample_strategy_counts_and_names_its_dataset() -> None:
    from trinity.algorithm import SAMPLE_STRATEGY, build

    strategy = build(SAMPLE_STRATEGY, "mix", {"expert_data_ratio": 0.3})
    assert strategy.expert_batch_size(8) == 3  # ceil(0.3 x 8) = ceil(2.4)
    assert strategy.expert_batch_size(10) == 3
    # the expert rows are part of the batch: 8 rows hold 5 rollouts
    experts = ExperienceQueue(capacity=10)
    experts.put(rollouts(4))
    batch = strategy.select(rollouts(8), 8, auxiliary={"sft_dataset": experts})
    assert [bool(e.info.get("is_expert")) for e in batch] == [False] * 5 + [True] * 3
    with pytest.raises(KeyError, match="auxiliary buffer 'sft_dataset'.*auxiliary buffers: other"):
        strategy.select(rollouts(2), 2, auxiliary={"other": None})
