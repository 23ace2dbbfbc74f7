"""Helpers of the config tests."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any


def minimal_config(root: Path) -> dict[str, Any]:
    """The smallest valid config of mode both (GRPO with 4 rollouts per task)."""
    return {
        "project": "proj",
        "name": "run",
        "checkpoint_root_dir": str(root / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
        "model": {"model_path": "tiny-model", "max_prompt_tokens": 64, "max_response_tokens": 32},
        "buffer": {
            "batch_size": 2,
            "explorer_input": {"taskset": {"name": "tasks", "path": "/data/tasks"}},
            "trainer_input": {"experience_buffer": {"name": "exp"}},
        },
    }


def resolved_config(data: dict[str, Any]) -> Any:
    """``data`` built, resolved (at a fixed time) and validated."""
    from trinity.config import config_from_dict, resolve, validate

    cfg = resolve(config_from_dict(data), now=datetime(2024, 1, 1))
    validate(cfg)
    return cfg
