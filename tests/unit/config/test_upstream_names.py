"""Trinity-RFT names of parts: ``storage_type: task_dir`` is read here; the weight sync
``hccl``, the engines ``sglang`` and ``tinker`` and the ``model.tinker`` section are
refused in one line naming the key, the value and what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_testing import minimal_config, resolved_config

from trinity.config import ConfigError


def test_task_dir_holds_tasksets_only(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["buffer"]["explorer_input"]["taskset"]["storage_type"] = "task_dir"
    assert resolved_config(data).buffer.explorer_input.taskset.storage_type == "task_dir"
    data["buffer"]["trainer_input"]["experience_buffer"]["storage_type"] = "task_dir"
    with pytest.raises(ConfigError) as err:
        resolved_config(data)
    line = str(err.value)
    assert "buffer.trainer_input.experience_buffer.storage_type" in line
    assert "task_dir" in line and "queue, sql or file" in line


@pytest.mark.parametrize(
    ("section", "given", "key", "says"),
    [
        ("synchronizer", {"sync_method": "hccl"}, "synchronizer.sync_method", "Ascend NPUs"),
        (
            "explorer",
            {"rollout_model": {"engine_type": "sglang"}},
            "explorer.rollout_model.engine_type",
            "SGLang",
        ),
        (
            "explorer",
            {"auxiliary_models": [{"model_path": "judge", "engine_type": "tinker"}]},
            "explorer.auxiliary_models[0].engine_type",
            "Tinker service",
        ),
        ("model", {"tinker": {"enable": True, "rank": 32}}, "model.tinker", "Tinker service"),
        ("trainer", {"trainer_type": "tinker"}, "trainer.trainer_type", "Tinker service"),
    ],
)
def test_parts_not_here_are_refused_naming_what_to_write(
    tmp_path: Path, section: str, given: dict, key: str, says: str
) -> None:
    data = minimal_config(tmp_path)
    data.setdefault(section, {}).update(given)
    with pytest.raises(ConfigError) as err:
        resolved_config(data)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"{key}: ") and says in line
    assert "; use " in line or "; remove " in line  # what to write instead


def test_a_stage_naming_sglang_is_refused_under_its_key(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["stages"] = [{"stage_name": "s", "explorer": {"rollout_model": {"engine_type": "sglang"}}}]
    with pytest.raises(
        ConfigError, match=r"^stages\[0\]\.explorer\.rollout_model\.engine_type: .*SGLang"
    ):
        resolved_config(data)


def test_dry_run_stops_at_hccl_in_one_line(tmp_path: Path) -> None:
    from cli_testing import DEMO, run_cli

    result = run_cli("run", "--config", str(DEMO), "--dry-run", "synchronizer.sync_method=hccl")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "sync_method" in line]
    assert len(lines) == 1, result.stderr
    assert "'hccl'" in lines[0] and "Ascend NPUs" in lines[0] and "use nccl" in lines[0]
