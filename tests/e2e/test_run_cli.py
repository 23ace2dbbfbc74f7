"""End to end: ``trinity run`` on the demo config with a tiny model for 2 steps."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from cli_testing import DEMO, run_cli, run_demo
from safetensors.torch import load_file


@pytest.mark.slow
def test_two_step_grpo_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = run_demo(
        tiny_model_dir,
        tmp_path,
        "name=e2e",
        "continue_from_checkpoint=true",
        "buffer.total_steps=2",
        "explorer.eval_interval=1",
        "trainer.save_interval=1",
        "explorer.runner_per_model=8",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    last_line = result.stdout.strip().splitlines()[-1]
    assert last_line.startswith("eval accuracy: "), result.stdout
    # the actors' start-up output (transformers' progress bars) stays off the terminal
    assert "Loading weights" not in result.stderr

    job = tmp_path / "trinity-demo" / "e2e"
    for rel in (
        "log/explorer.log",
        "log/trainer.log",
        "log/explorer_runner_0.log",
        "monitor/summary.png",
        "monitor/report.html",
        "latest_checkpointed_iteration.txt",
        "explorer_meta.json",
        "trainer_meta.json",
        "global_step_2/actor/model_world_size_1_rank_0.pt",
        "global_step_2/actor/extra_state_world_size_1_rank_0.pt",
        "global_step_2/actor/huggingface/config.json",
        "buffer/arithmetic_buffer.db",
    ):
        assert (job / rel).exists(), rel
    # the demo keeps one checkpoint, without the optimizer's state (save_contents)
    assert sorted(p.name for p in job.glob("global_step_*")) == ["global_step_2"]
    assert not (job / "global_step_2/actor/optim_world_size_1_rank_0.pt").exists()
    assert (job / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    # one node, sync_method memory: the weights went through the shared file, which the
    # run removed; the explorer took both versions
    trainer_log = (job / "log/trainer.log").read_text()
    assert "keeps the memory a step frees" in trainer_log  # the default
    (slot,) = re.findall(r"published through the shared file (\S+)", trainer_log)
    assert not Path(slot).exists()
    explorer_log = (job / "log/explorer.log").read_text()
    assert "synchronized to policy version 1" in explorer_log
    assert "synchronized to policy version 2" in explorer_log
    png = (job / "monitor" / "summary.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert "<img" in (job / "monitor" / "report.html").read_text()
    assert "best eval/arithmetic_eval/accuracy/mean" in result.stderr
    assert "final rollout/reward/mean=" in result.stderr
    assert list((job / "monitor" / "tensorboard").glob("e2e_trainer/events.*"))
    assert list((job / "monitor" / "tensorboard").glob("e2e_explorer/events.*"))

    # the policy moved: trained weights differ from the initial ones
    initial = load_file(tiny_model_dir / "model.safetensors")
    trained = torch.load(
        job / "global_step_2/actor/model_world_size_1_rank_0.pt", weights_only=True
    )
    changed = [k for k, v in initial.items() if not torch.equal(v.float(), trained[k].float())]
    assert changed, "no parameter changed after two GRPO steps"

    # every logged trainer metric is finite, and the documented ones are there
    rows = [
        json.loads(line)
        for line in (job / "monitor" / "e2e_trainer_metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/lr", "time/train_step"):
            assert key in row
        assert all(math.isfinite(v) for v in row.values() if isinstance(v, float))
    evals = [
        json.loads(line)
        for line in (job / "monitor" / "e2e_explorer_metrics.jsonl").read_text().splitlines()
    ]
    assert any("eval/arithmetic_eval/accuracy/mean" in r for r in evals)

    # the experience backup in the job dir holds every experience the explorer produced
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from trinity.common.schema.sql_schema import ExperienceModel

    sess = sessionmaker(bind=create_engine(f"sqlite:///{job}/buffer/arithmetic_buffer.db"))()
    exps = [ExperienceModel.to_experience(e) for e in sess.query(ExperienceModel).all()]
    assert len(exps) == 2 * 2 * 8
    assert all(e.response_text is not None for e in exps)


def test_dry_run_prints_batch_arithmetic() -> None:
    result = run_cli("run", "--config", str(DEMO), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "experiences per train step" in result.stdout
    assert "buffer.train_batch_size): 16" in result.stdout


def test_config_error_is_one_line_exit_2() -> None:
    result = run_cli("run", "--config", str(DEMO), "--dry-run", "algorithm.repeat_times=1")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "algorithm.repeat_times" in lines[0]
    assert "Traceback" not in result.stderr


def test_help_describes_commands() -> None:
    top = run_cli("--help")
    assert top.returncode == 0
    for command in ("run", "convert", "studio", "log", "view"):
        assert command in top.stdout
    run_help = run_cli("run", "--help")
    for option in ("--config", "--dry-run", "--plugin-dir", "KEY=VALUE"):
        assert option in run_help.stdout


@pytest.mark.slow
def test_an_actor_that_cannot_start_fails_the_run_with_its_error(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    # rows without the prompt column math_workflow reads: the explorer's start fails
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"question": "1 + 1 = ?", "answer": "2"}\n' * 4)
    # mode explore: no trainer process to start and stop around the explorer's failure
    result = run_demo(
        tiny_model_dir,
        tmp_path,
        "name=bad-taskset",
        "mode=explore",
        "buffer.total_steps=1",
        f"buffer.explorer_input.taskset.path={data}",
        "buffer.explorer_input.taskset.format.prompt_key=prompt",
        "buffer.explorer_input.eval_tasksets=[]",
    )
    assert result.returncode == 1, result.stderr[-4000:]
    assert "trinity: an actor failed" in result.stderr
    assert "missing key 'prompt' (named by format.prompt_key)" in result.stderr
    # reported as an error, not as the worker aborting (trinity.launch.actor_start)
    assert "Fatal Python error" not in result.stderr
    assert "SIGABRT" not in result.stderr
