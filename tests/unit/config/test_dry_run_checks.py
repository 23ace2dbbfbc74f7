"""``--dry-run`` stops on what would otherwise fail once the run has started: a
``checkpoint_root_dir`` the run cannot create or write, a seed torch cannot take, an
engine whose context is shorter than the prompt and response it must hold."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from config_testing import resolved_config

from trinity.config import ConfigError, config_from_dict, resolve
from trinity.config.lookups import check_lookups

NOW = datetime(2024, 5, 6, 7, 8, 9)
REPO = Path(__file__).resolve().parents[3]
TORCH_SEEDS = "[-2**63, 2**64 - 1]"


def dry_run(tmp_path: Path, data: dict[str, Any]) -> subprocess.CompletedProcess:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "trinity", "run", "--config", str(path), "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def the_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("trinity: config error: "), line
    return line.removeprefix("trinity: config error: ")


def lookup_failure(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        check_lookups(resolve(config_from_dict(data), now=NOW), now=NOW)
    return caught.value


def validate_failure(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        resolved_config(data)
    return caught.value


# checkpoint_root_dir


def test_a_root_under_a_regular_file_stops_the_dry_run(
    data: dict[str, Any], tmp_path: Path
) -> None:
    # a short directory: the error line shortens a long path in its middle, and the
    # path of pytest's tmp_path under xdist is long enough for that
    short = Path(tempfile.mkdtemp(prefix="ck", dir="/tmp"))
    try:
        (short / "notes.txt").write_text("a file, not a directory")
        data["checkpoint_root_dir"] = str(short / "notes.txt" / "ckpt")
        line = the_error_line(dry_run(tmp_path, data))
    finally:
        shutil.rmtree(short)
    assert line.startswith("checkpoint_root_dir: cannot be created"), line
    assert f"{short / 'notes.txt'} is not a directory" in line
    assert f"(given: '{short / 'notes.txt' / 'ckpt'}')" in line


def test_a_root_that_is_a_file_or_holds_the_project_as_a_file_fails(
    data: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "root").write_text("")
    data["checkpoint_root_dir"] = str(tmp_path / "root")
    assert lookup_failure(data).path == "checkpoint_root_dir"
    (tmp_path / "root").unlink()
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "proj").write_text("")  # <root>/<project> is where the run goes
    err = lookup_failure(data)
    assert err.path == "checkpoint_root_dir"
    assert f"{tmp_path / 'root' / 'proj'} is not a directory" in str(err)


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="root writes into a directory whatever its permission bits",
)
def test_a_root_under_a_read_only_directory_fails(data: dict[str, Any], tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        data["checkpoint_root_dir"] = str(locked / "ckpt")
        err = lookup_failure(data)
    finally:
        locked.chmod(0o755)
    assert err.path == "checkpoint_root_dir"
    assert f"{locked} is not writable" in str(err)


def test_a_root_that_can_be_created_passes_and_is_not_created(
    data: dict[str, Any], tmp_path: Path
) -> None:
    root = tmp_path / "a" / "b" / "ckpt"
    data["checkpoint_root_dir"] = str(root)
    check_lookups(resolve(config_from_dict(data), now=NOW), now=NOW)
    assert not (tmp_path / "a").exists()


def test_a_dangling_symlink_on_the_way_fails(data: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "gone").symlink_to(tmp_path / "missing")
    data["checkpoint_root_dir"] = str(tmp_path / "gone" / "ckpt")
    err = lookup_failure(data)
    assert err.path == "checkpoint_root_dir"
    assert "is not a directory" in str(err)


# seed


def test_a_seed_torch_cannot_take_stops_the_dry_run(data: dict[str, Any], tmp_path: Path) -> None:
    data["seed"] = 2**64
    line = the_error_line(dry_run(tmp_path, data))
    assert line.startswith(f"seed: is outside what torch.manual_seed takes (given: {2**64})"), line
    assert TORCH_SEEDS in line


@pytest.mark.parametrize("seed", [-(2**63), 0, 2**64 - 1])
def test_the_seeds_at_torchs_bounds_pass(data: dict[str, Any], seed: int) -> None:
    import torch

    data["seed"] = seed
    resolved_config(data)
    torch.Generator().manual_seed(seed)  # the bounds are torch's own


def test_a_seed_past_torchs_bounds_names_the_key(data: dict[str, Any]) -> None:
    import torch

    data["seed"] = -(2**63) - 1
    err = validate_failure(data)
    assert (err.path, err.value) == ("seed", -(2**63) - 1)
    with pytest.raises((RuntimeError, ValueError, OverflowError)):
        torch.manual_seed(-(2**63) - 1)


def test_each_engine_replica_needs_a_seed_torch_takes(data: dict[str, Any]) -> None:
    # replica i samples with seed + i: two replicas at 2**64 - 1 would need 2**64
    data["seed"] = 2**64 - 1
    data["explorer"] = {"rollout_model": {"engine_num": 2}}
    err = validate_failure(data)
    assert err.path == "explorer.rollout_model.seed"
    assert "replica 1 would sample with seed 18446744073709551616" in str(err)
    data["explorer"] = {"auxiliary_models": [{"model_path": "judge", "seed": 2**64}]}
    assert validate_failure(data).path == "explorer.auxiliary_models[0].seed"


# engine context


def test_an_engine_context_shorter_than_prompt_and_response_stops_the_dry_run(
    data: dict[str, Any], tmp_path: Path
) -> None:
    # the rollout model takes model's 64 prompt and 32 response tokens
    data["explorer"] = {"rollout_model": {"max_model_len": 80}}
    line = the_error_line(dry_run(tmp_path, data))
    assert line.startswith(
        "explorer.rollout_model.max_model_len: is shorter than max_prompt_tokens + "
        "max_response_tokens (64 + 32 = 96) (given: 80)"
    ), line
    assert "at least 96" in line


def test_an_auxiliary_engine_context_is_checked_too(data: dict[str, Any]) -> None:
    judge = {"model_path": "judge", "max_prompt_tokens": 100, "max_response_tokens": 50}
    data["explorer"] = {"auxiliary_models": [{**judge, "max_model_len": 150}]}
    resolved_config(data)
    data["explorer"] = {"auxiliary_models": [{**judge, "max_model_len": 149}]}
    err = validate_failure(data)
    assert (err.path, err.value) == ("explorer.auxiliary_models[0].max_model_len", 149)


# keys of the other kind of storage


def test_the_dry_run_lists_queue_and_task_settings_set_on_the_wrong_storage(
    data: dict[str, Any], tmp_path: Path
) -> None:
    data["buffer"]["explorer_input"]["taskset"]["capacity"] = 50
    data["buffer"]["trainer_input"]["experience_buffer"]["workflow_args"] = {"max_turns": 3}
    done = dry_run(tmp_path, data)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.split("# Keys without effect\n")[1].strip().splitlines()
    assert line.startswith("accepted, no effect here: buffer.explorer_input.taskset.capacity (")
    assert "buffer.trainer_input.experience_buffer.workflow_args (a task setting" in line
