"""Shared fixtures of the config tests: the example files' env vars and a minimal config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


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
    return {
        "project": "proj",
        "name": "run",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
        "model": {"model_path": "tiny-model", "max_prompt_tokens": 64, "max_response_tokens": 32},
        "buffer": {
            "batch_size": 2,
            "explorer_input": {"taskset": {"name": "tasks", "path": "/data/tasks"}},
            "trainer_input": {"experience_buffer": {"name": "exp"}},
        },
    }
