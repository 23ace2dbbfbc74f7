"""Seconds per GRPO step, rollout tokens per second and peak GPU memory on one GPU.

    .venv/bin/python benchmarks/gpu_step.py                  # 2 warm-up + 5 timed steps
    .venv/bin/python benchmarks/gpu_step.py --steps 2 --warmup 1

The step of ``benchmarks/grpo_step.py`` (the default model, SmolLM2-135M-Instruct as
``trinity/rollout/model_path.py`` resolves it; two tasks of the demo's arithmetic taskset with
8 rollouts each, at most 32 new tokens, one AdamW update on the whole batch, no KL and
no reference model), with the rollout engine and the trainer in this process on the
same GPU, as a one-GPU run colocates them (``cluster.gpu_per_node: 1``): rollout, train
step, then the weights copied into the engine on the device. Prints one line per timed
step (rollout, train and sync seconds, tokens), then the medians, the rollout tokens
per second (response tokens over rollout seconds) and the peak GPU memory
(``torch.cuda.max_memory_allocated`` over the timed steps). On a machine without CUDA it
prints one line saying so and exits with status 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from bench_common import default_model_dir
from grpo_step import TrinityGRPO, load_tasks

GPU_EXTRA = ("cluster.gpu_per_node=1", "cluster.node_num=1")


class GpuGRPO(TrinityGRPO):
    """TrinityGRPO on CUDA, counting the response tokens of each rollout."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tokens: list[int] = []

    async def _rollout(self) -> list[Any]:
        experiences = await super()._rollout()
        self.tokens.append(sum(int(e.tokens.numel()) - e.prompt_length for e in experiences))
        return experiences

    def step(self) -> float:
        import torch

        seconds = super().step()
        torch.cuda.synchronize()
        return seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (default 2)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.5,
        help="the engine's share of the GPU, as a colocated run gives it (default 0.5)",
    )
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("gpu_step: no CUDA device here; this benchmark needs one GPU")
        return 1

    model_dir = default_model_dir()
    device = torch.device("cuda", torch.cuda.current_device())
    bench = GpuGRPO(
        model_dir,
        load_tasks(args.seed),
        total_steps=args.warmup + args.steps,
        extra=GPU_EXTRA,
        engine_args={"device": device, "gpu_memory_utilization": args.gpu_memory_utilization},
    )
    if bench.trainer.device.type != "cuda":
        print(f"gpu_step: the trainer computes on {bench.trainer.device}, not on CUDA")
        return 1
    print(f"device: {torch.cuda.get_device_name(device)}, model: {model_dir.name}")
    try:
        for _ in range(args.warmup):
            bench.step()
        torch.cuda.reset_peak_memory_stats(device)
        seconds, rates = [], []
        for i in range(args.steps):
            start = time.perf_counter()
            step = bench.step()
            seconds.append(step)
            rollout, train, sync = (bench.phases[k][-1] for k in ("rollout", "train", "sync"))
            tokens = bench.tokens[-1]
            rates.append(tokens / rollout)
            print(
                f"step {i + 1}: {step:.3f}s (rollout {rollout:.3f}s, train {train:.3f}s, "
                f"sync {sync:.3f}s), {tokens} response tokens, "
                f"{time.perf_counter() - start:.3f}s wall"
            )
        peak = torch.cuda.max_memory_allocated(device)
    finally:
        bench.close()
    print(f"seconds per GRPO step (median of {args.steps}): {statistics.median(seconds):.3f}")
    print(f"rollout tokens/s (median): {statistics.median(rates):.1f}")
    print(f"peak GPU memory: {peak / 2**30:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
