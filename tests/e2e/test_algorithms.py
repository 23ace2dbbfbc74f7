"""Every algorithm type's example config, run for 2 steps on the tiny model.

ppo runs through ``trinity run`` (Ray actors, as a user runs them, with a critic); the
other types run the same example configs through the explorer and trainer classes in
this process, which exercises the same code without starting Ray once per type.
``trinity run`` runs grpo in most end-to-end tests (the demo config, ``test_run_cli.py``)
and trains on a dataset (sft) as the first stage of ``test_stages.py``. ``--dry-run`` is
checked to show each type's resolved parts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from cli_testing import REPO, run_cli
from safetensors.torch import load_file

from trinity.config import dry_run_report, load_config
from trinity.config.algorithm_defaults import ALGORITHM_DEFAULTS

EXAMPLES = REPO / "examples"
TYPES = sorted(ALGORITHM_DEFAULTS)


def example(algorithm_type: str) -> Path:
    return EXAMPLES / algorithm_type / f"{algorithm_type}.yaml"


def small(model_dir: Path, root: Path, name: str, mode: str) -> list[str]:
    """Overrides that shrink an example to 2 quick steps on the tiny model."""
    common = [
        f"model.model_path={model_dir}",
        f"checkpoint_root_dir={root}",
        f"name={name}",
        "continue_from_checkpoint=true",
        "buffer.total_steps=2",
        "model.max_response_tokens=8",
    ]
    if mode == "train":
        return [*common, "buffer.batch_size=2", "buffer.train_batch_size=null"]
    return [
        *common,
        "buffer.batch_size=2",
        "algorithm.repeat_times=2",
        "buffer.explorer_input.eval_tasksets=[]",
        "explorer.eval_on_startup=false",
        "explorer.runner_per_model=4",
    ]


def trainer_rows(job: Path, name: str) -> list[dict]:
    path = job / "monitor" / f"{name}_trainer_metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_finite(row: dict) -> None:
    bad = {k: v for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
    assert not bad, bad


@pytest.mark.parametrize("algorithm_type", TYPES)
def test_every_type_has_an_example_whose_dry_run_shows_its_parts(algorithm_type: str) -> None:
    cfg = load_config(example(algorithm_type))
    assert cfg.algorithm.algorithm_type == algorithm_type
    report = dry_run_report(cfg)
    table = ALGORITHM_DEFAULTS[algorithm_type]
    for part in ("advantage_fn", "policy_loss_fn", "entropy_loss_fn", "sample_strategy"):
        # a part the example leaves unset shows the type's default
        assert f"  {part}: {getattr(cfg.algorithm, part)}\n" in report
        assert getattr(cfg.algorithm, part) == getattr(table, part), part
    assert f"  use_critic: {str(table.use_critic).lower()}\n" in report


def test_dry_run_shows_what_the_user_set_over_the_type_defaults() -> None:
    result = run_cli(
        "run",
        "--config",
        str(example("grpo")),
        "--dry-run",
        "algorithm.policy_loss_fn=gspo",
        "algorithm.kl_loss_fn=abs",
    )
    assert result.returncode == 0, result.stderr
    algorithm = result.stdout.split("\nalgorithm:\n", 1)[1].split("\nmodel:\n", 1)[0] + "\n"
    assert "  policy_loss_fn: gspo\n" in algorithm  # set by the user
    assert "  kl_loss_fn: abs\n" in algorithm
    assert "  advantage_fn: grpo\n" in algorithm  # grpo's default
    assert "  use_reference: true\n" in algorithm


@pytest.mark.slow
def test_ppo_through_the_cli(tiny_model_dir: Path, tmp_path: Path) -> None:
    # the trainer, with its critic, returns the memory a step frees to the OS between
    # steps (the default keeps it), and the queue backs up to an SQLite file of our choice
    backup = tmp_path / "backup.db"
    result = run_cli(
        "run",
        "--config",
        str(example("ppo")),
        *small(tiny_model_dir, tmp_path, "ppo", "both"),
        "trainer.keep_memory_between_steps=false",
        f"buffer.trainer_input.experience_buffer.path=sqlite:///{backup}",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    job = tmp_path / "trinity-examples" / "ppo"
    assert "returns the memory a step frees to the OS" in (job / "log/trainer.log").read_text()
    assert backup.stat().st_size > 0
    rows = trainer_rows(job, "ppo")
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert_finite(row)
        for key in ("critic/vf_loss", "critic/vf_clipfrac", "critic/grad_norm", "actor/pg_loss"):
            assert key in row, key
    for kind in ("model", "optim", "extra_state"):
        assert (job / f"global_step_2/critic/{kind}_world_size_1_rank_0.pt").exists()


def run_in_process(
    cfg, model_dir: Path, log_dir: Path, steps: int
) -> tuple[list[dict[str, float]], dict[str, torch.Tensor]]:
    """explore -> buffer -> train -> sync, ``steps`` times, without Ray: the metrics of
    each train step and the final weights."""
    from trinity.buffer import make_experience_buffer
    from trinity.explorer.explorer import Explorer
    from trinity.trainer.train_input import TrainInput
    from trinity.trainer.trainer import Trainer

    explorer = Explorer(cfg, model_dir=model_dir, log_dir=log_dir)
    trainer = Trainer(cfg, model_dir=model_dir, total_steps=steps)
    buffer = make_experience_buffer(cfg.buffer.trainer_input.experience_buffer)
    train_input = TrainInput(cfg, trainer.tokenizer, lambda n: buffer.get(n, timeout=0))
    history = []
    try:
        for step in range(1, steps + 1):
            experiences, _ = explorer.explore_step(step)
            buffer.put(experiences)
            history.append(trainer.train_step(train_input.next_batch(trainer.global_step)))
            weights = trainer.weights_for_sync()
            explorer.load_weights(weights, step)
    finally:
        explorer.close()
        buffer.close()
    return history, weights


def policy_moved(model_dir: Path, weights: dict[str, torch.Tensor]) -> bool:
    initial = load_file(model_dir / "model.safetensors")
    return any(not torch.equal(v.float(), weights[k].float()) for k, v in initial.items())


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm_type",
    [
        *("grpo", "opmd", "rloo", "reinforceplusplus", "gspo", "mix"),
        *("asymre", "topr", "cispo", "sapo", "mix_chord", "sppo", "rec", "grpo_verl"),
    ],
)
def test_rollout_types_in_process(
    tiny_model_dir: Path, tmp_path: Path, algorithm_type: str
) -> None:
    overrides = small(tiny_model_dir, tmp_path, algorithm_type, "both")
    cfg = load_config(example(algorithm_type), overrides)
    history, weights = run_in_process(cfg, tiny_model_dir, tmp_path / "log", steps=2)
    assert len(history) == 2
    for metrics in history:
        assert_finite(metrics)
        assert "actor/pg_loss" in metrics
    if algorithm_type == "grpo":
        assert all("actor/kl_loss" in m for m in history)  # low_var_kl in the loss
        assert policy_moved(tiny_model_dir, weights)
    if algorithm_type in ("mix", "mix_chord"):
        # train_batch_size 6 holds the 4 rollouts of an explore step: ceil(0.25 x 6) = 2
        assert history[0]["batch/expert_size"] == 2
        assert history[0]["actor/sft_loss"] > 0


def train_in_process(cfg, model_dir: Path, steps: int):
    """``steps`` train steps on the config's dataset (sft, dpo), without Ray: the metrics of
    each step and the trainer."""
    from trinity.trainer.train_input import TrainInput
    from trinity.trainer.trainer import Trainer

    trainer = Trainer(cfg, model_dir=model_dir, total_steps=steps)
    train_input = TrainInput(cfg, trainer.tokenizer)  # reads the example's dataset
    history = [
        trainer.train_step(train_input.next_batch(trainer.global_step)) for _ in range(steps)
    ]
    return history, trainer


@pytest.mark.slow
def test_sft_in_process(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = load_config(example("sft"), small(tiny_model_dir, tmp_path, "sft", "train"))
    history, trainer = train_in_process(cfg, tiny_model_dir, steps=2)
    assert all(m["batch/size"] == 2 for m in history)
    assert all(m["actor/sft_loss"] > 0 for m in history)
    assert policy_moved(tiny_model_dir, trainer.weights_for_sync())


@pytest.mark.slow
def test_dpo_in_process(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = load_config(example("dpo"), small(tiny_model_dir, tmp_path, "dpo", "train"))
    history, _ = train_in_process(cfg, tiny_model_dir, steps=2)
    # 2 pairs per step, each a chosen and a rejected sequence
    assert all(m["batch/size"] == 4 for m in history)
    # step 1 starts at the reference policy: loss log 2
    assert history[0]["actor/dpo_loss"] == pytest.approx(math.log(2), abs=1e-3)
    assert_finite(history[1])
