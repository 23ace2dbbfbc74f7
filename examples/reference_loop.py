"""Run the RL loop in this process, without Ray, and print each step's reward.

The loop is ``trinity.loop`` (read it first: one RL step, top to bottom): the same
explorer, experience pipeline, buffer, trainer and weight load that ``trinity run``
starts as Ray actors, stepped synchronously here; the runners' logs and the buffer's
backup go to the job directory, and nothing is checkpointed or monitored.

    python examples/reference_loop.py --config examples/arithmetic/grpo.yaml --steps 2
    python examples/reference_loop.py --config examples/arithmetic/grpo.yaml --steps 2 \\
        algorithm.repeat_times=4           # dotted overrides, as `trinity run` takes them
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from trinity import loop
from trinity.config import job_dir as get_job_dir
from trinity.config import load_config


def main(argv: Sequence[str] | None = None) -> list[loop.StepResult]:
    """Parse the arguments, run the steps and print one line per step; returns the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the YAML config of the run")
    parser.add_argument("--steps", type=int, default=2, help="RL steps to run")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. seed=1")
    args = parser.parse_args(argv)
    config = load_config(args.config, args.overrides)
    job_dir = get_job_dir(config)  # runner logs, the buffer's backup, the pipeline's input
    for sub in ("log", "buffer"):
        (job_dir / sub).mkdir(parents=True, exist_ok=True)
    print(f"job dir {job_dir}", flush=True)
    run = loop.build(config, total_steps=args.steps, job_dir=job_dir)
    results = []
    try:
        for result in loop.run_steps(run, args.steps):
            train = result.train or {}
            print(
                f"step {result.step}: reward {result.explore['rollout/reward/mean']:.3f}, "
                f"loss {train.get('actor/pg_loss', float('nan')):.4f}, "
                f"policy version {result.version}",
                flush=True,
            )
            results.append(result)
    finally:
        loop.close(run)
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
