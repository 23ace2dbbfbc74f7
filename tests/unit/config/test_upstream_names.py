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
