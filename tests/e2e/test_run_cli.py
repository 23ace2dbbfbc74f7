"""``trinity run`` from the command line: the dry run, config errors, help, and an actor
that fails at start. The 2-step run of the demo config on the tiny model, with every file
it writes, runs on a separately started cluster (tests/integration/test_ray_cluster.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_testing import DEMO, run_cli, run_demo


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
