"""The driver of ``trinity run`` starts the actors without importing torch: torch costs
a process ~0.2 GiB, and the driver's memory counts in the run's peak."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

DRIVER = """
import sys
from datetime import datetime

from trinity.config import load_config
from trinity.launch import run
# what run_stage imports before it starts the actors
from trinity.launch.actor_start import deferred_start_errors
from trinity.launch.cluster import connect, torch_work_overlaps
from trinity.launch.resume import resume_step
from trinity.launch.roles import ExplorerRole, TrainerRole
from trinity.launch.trainer_group import start_trainer, write_placement
from trinity.rollout.model_path import resolve_model_path
# what a --plugin-dir reward function imports to register itself (the driver loads plugins)
from trinity.rewards.registry import REWARD_FNS
from trinity.sync.synchronizer import Synchronizer
from trinity.sync.weight_slot import new_slot_path

config = load_config("examples/arithmetic/grpo.yaml")
print("steps", run.count_steps(config))
print("torch imported:", "torch" in sys.modules)
# a stage that trains on a dataset: its steps are counted from the dataset's rows
print("sft steps", run.count_steps(load_config("examples/sft/sft.yaml")))
print("torch imported by the sft count:", "torch" in sys.modules)
"""


def test_the_driver_starts_a_run_without_torch() -> None:
    out = subprocess.run(
        [sys.executable, "-c", DRIVER], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert "steps 40" in out, out
    assert "torch imported: False" in out, out
    assert "sft steps 42" in out, out  # 42 batches of the example's rows
    # the dataset's layout is read with datasets, which imports torch itself in some
    # versions (4.2, the floor); the driver adds no torch import of its own
    if not _datasets_imports_torch():
        assert "torch imported by the sft count: False" in out, out


def _datasets_imports_torch() -> bool:
    probe = "import sys, datasets; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"
