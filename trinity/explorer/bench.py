"""Mode ``bench``: evaluate the base model and the checkpoints a run saved.

    trinity run --config run.yaml mode=bench                                  # all of them
    trinity run --config run.yaml mode=bench explorer.bench_on_latest_checkpoint=true

The job directory is the run's own (``<checkpoint_root_dir>/<project>/<name>``). Every
eval taskset is run on the base model (``model.model_path``, step 0) and then on each
``global_step_<N>`` that holds model weights, oldest first; with
``explorer.bench_on_latest_checkpoint`` only the newest checkpoint (or the base model
when there is none) is evaluated. Each evaluation is one metric row of the monitor run
``<name>_bench``, logged at the checkpoint's step. With ``model.external_model.enable``
the external endpoint is evaluated once, at step 0.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from trinity.config import Config
from trinity.explorer.explorer import Explorer
from trinity.trainer import checkpoint as ckpt
from trinity.utils.log import get_actor_logger


class BenchError(RuntimeError):
    """Bench mode cannot run on this configuration or job directory."""


def bench_steps(job_dir: Path, latest_only: bool) -> list[int]:
    """Steps to evaluate: 0 (the base model) and every checkpoint with model weights."""
    saved = [
        s
        for s in ckpt.list_steps(job_dir)
        if any((ckpt.step_dir(job_dir, s) / "actor").glob("model_world_size_*_rank_*.pt"))
    ]
    if latest_only:
        return saved[-1:] or [0]
    return [0, *saved]


def checkpoint_weights(job_dir: Path, step: int) -> dict[str, torch.Tensor]:
    """The full policy state dict of ``global_step_<step>`` (rank files merged)."""
    from trinity.trainer.checkpoint_merge import load_fsdp_state_dict_from_verl_checkpoint

    return load_fsdp_state_dict_from_verl_checkpoint(ckpt.step_dir(job_dir, step) / "actor")


class Bench:
    """Evaluates one model after another with a single explorer (one engine load)."""

    def __init__(
        self,
        config: Config,
        job_dir: Path,
        model_dir: str,
        monitor: Any,
        logger: logging.Logger | None = None,
    ) -> None:
        if not config.buffer.explorer_input.eval_tasksets:
            raise BenchError(
                "mode bench evaluates buffer.explorer_input.eval_tasksets, and none is set"
            )
        self.config = config
        self.job_dir = Path(job_dir)
        self.monitor = monitor
        self.model_dir = model_dir
        self.logger = logger or get_actor_logger(
            "bench", self.job_dir / "log", level=config.log.level
        )
        self.explorer = Explorer(
            config, model_dir=model_dir, log_dir=self.job_dir / "log", logger=self.logger
        )

    def run(self) -> dict[int, dict[str, float]]:
        """Evaluate every selected model; returns step -> metrics, in step order."""
        steps = bench_steps(self.job_dir, self.config.explorer.bench_on_latest_checkpoint)
        if self.config.model.external_model.enable:
            steps = [0]  # the endpoint serves its own weights; no checkpoint goes to it
        self.logger.info("bench evaluates steps %s of %s", steps, self.job_dir)
        rows: dict[int, dict[str, float]] = {}
        for step in steps:
            if step > 0:
                start = time.perf_counter()
                self.explorer.load_weights(self._weights(step), step)
                load_s = time.perf_counter() - start
            else:
                load_s = 0.0
            metrics = self.explorer.evaluate(step)
            metrics["time/bench_load"] = load_s
            self.monitor.log(metrics, step)
            self.logger.info("bench step %d: %s", step, _accuracies(metrics))
            rows[step] = metrics
        return rows

    def _weights(self, step: int) -> dict[str, torch.Tensor]:
        state = checkpoint_weights(self.job_dir, step)
        if any(".lora_A." in key for key in state):
            # a LoRA checkpoint holds the adapter only: merge it into the base weights
            from trinity.sync.weights import WeightReceiver

            receiver = WeightReceiver(self.config, self.job_dir, None, self.model_dir, self.logger)
            state = receiver.full_weights(state)
        return state

    def close(self) -> None:
        self.explorer.close()


def _accuracies(metrics: dict[str, float]) -> str:
    keys = [k for k in metrics if k.endswith("/accuracy/mean")]
    return ", ".join(f"{k}={metrics[k]:.4g}" for k in keys) or "no accuracy metrics"
