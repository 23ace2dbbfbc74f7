"""Shared fixtures of the config tests: the example files' env vars and a minimal config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from config_testing import minimal_config


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Every environment variable the example files read, pointing into tmp_path."""
    values = {
        "HOME": str(tmp_path / "home"),
        "MODEL_PATH": str(tmp_path / "models" / "policy"),
        "TRINITY_MODEL_PATH": str(tmp_path / "models" / "policy"),
        "TRINITY_TASKSET_PATH": str(tmp_path / "data" / "gsm8k"),
        "TRINITY_SFT_DATASET_PATH": str(tmp_path / "data" / "sft"),
        "TRINITY_DATASET_PATH": str(tmp_path / "data" / "sft_warmup"),
        "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "checkpoints"),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


@pytest.fixture
def minimal(tmp_path: Path) -> dict[str, Any]:
    """The smallest valid config of mode both (GRPO with 4 rollouts per task)."""
    return minimal_config(tmp_path)


@pytest.fixture
def data(minimal: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The minimal config, its taskset a file that exists."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"prompt": "1+1", "response": "2"}\n')
    minimal["buffer"]["explorer_input"]["taskset"]["path"] = str(tasks)
    return minimal
