"""Workflow names keep Trinity-RFT's meaning: ``tool_call_workflow`` (its registry name
since the rename, ``toolcall_workflow`` before) is the ToolACE function-call workflow;
the multi-turn workflow that runs registered tools is ``multi_turn_tool_workflow``."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from trinity.config import ConfigError, config_from_dict, resolve, validate
from trinity.config.lookups import BUILTIN_NAMES, check_lookups
from trinity.workflows.multi_turn_tool import ToolCallWorkflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.tool_call import ToolCallN1Workflow


def test_both_upstream_names_are_the_toolace_workflow() -> None:
    assert WORKFLOWS.get("tool_call_workflow") is ToolCallN1Workflow
    assert WORKFLOWS.get("toolcall_workflow") is ToolCallN1Workflow
    assert WORKFLOWS.get("multi_turn_tool_workflow") is ToolCallWorkflow
    names = {"tool_call_workflow", "toolcall_workflow", "multi_turn_tool_workflow"}
    assert names <= BUILTIN_NAMES["workflow"]


def _config(tmp_path: Path, workflow: str, workflow_args: dict) -> object:
    data_dir = tmp_path / "tasks"
    data_dir.mkdir()
    (data_dir / "train.jsonl").write_text('{"prompt": "q", "response": "a"}\n')
    taskset = {
        "name": "tasks",
        "path": str(data_dir),
        "default_workflow_type": workflow,
        "workflow_args": workflow_args,
    }
    cfg = resolve(
        config_from_dict(
            {
                "checkpoint_root_dir": str(tmp_path / "ckpt"),
                "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
                "model": {"model_path": "tiny-model", "max_model_len": 128},
                "buffer": {
                    "batch_size": 2,
                    "explorer_input": {"taskset": taskset},
                    "trainer_input": {"experience_buffer": {"name": "exp"}},
                },
            }
        ),
        now=datetime(2024, 1, 1),
    )
    validate(cfg)
    return cfg


def test_max_turns_under_tool_call_workflow_names_the_tool_running_workflow(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as err:
        check_lookups(_config(tmp_path, "tool_call_workflow", {"max_turns": 3}))
    line = str(err.value)
    assert "default_workflow_type" in line and "ToolACE" in line
    assert "multi_turn_tool_workflow" in line


@pytest.mark.parametrize(
    ("workflow", "args"),
    [("tool_call_workflow", {}), ("multi_turn_tool_workflow", {"max_turns": 3})],
)
def test_each_name_with_its_own_arguments_passes(tmp_path: Path, workflow: str, args: dict) -> None:
    check_lookups(_config(tmp_path, workflow, args))
