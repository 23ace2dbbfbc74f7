"""The learning-direction check (tests/integration/test_learning_direction.py) for grpo on
one CUDA device: the explorer's engine (its static decode path: continuous batching over
a static KV cache, CUDA graphs) and the trainer both on the GPU; the reward rises by the
margin, and with the advantages' sign flipped it does not.

Marker ``gpu``; skipped where CUDA is absent. ``pytest -n 0 -m gpu tests/gpu``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA device (torch.cuda.is_available() is False here)",
    ),
]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import test_learning_direction as direction  # noqa: E402
from trainer_testing import make_config  # noqa: E402  (on the path that module set)

rollouts = direction.rollouts  # its module-scoped fixture: one explorer for both runs

GPU = {"gpu_per_node": 1, "node_num": 1}


def make_gpu_config(model_dir: Path, root: Path, algorithm_type: str = "grpo", **sections):
    """The trainer tests' ``make_config`` with one GPU for the engine and the trainer."""
    return make_config(model_dir, root, algorithm_type, cluster=GPU, **sections)


@pytest.fixture(scope="module", autouse=True)
def _on_one_gpu():
    """Every config of the module (the shared explorer's and each run's) on the GPU."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direction, "make_config", make_gpu_config)
        yield


def test_grpo_on_cuda_raises_the_reward(tiny_model_dir: Path, tmp_path: Path, rollouts) -> None:  # noqa: F811
    engine = rollouts.explorer.engines.engines[0]
    assert engine.device.type == "cuda" and engine.decode_mode == "static"
    rewards = direction.learn(tiny_model_dir, tmp_path, "grpo", rollouts)
    assert direction.gain(rewards, rollouts.initial_reward) >= direction.MARGIN, rewards


def test_grpo_on_cuda_flipped_misses_the_margin(
    tiny_model_dir: Path,
    tmp_path: Path,
    rollouts,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rewards = direction.learn(tiny_model_dir, tmp_path, "grpo", rollouts, flip=monkeypatch)
    assert direction.gain(rewards, rollouts.initial_reward) < direction.MARGIN, rewards
