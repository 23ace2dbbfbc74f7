"""``mode: bench``: evaluate the base model and each checkpoint of an earlier run.

It runs in the driver process (``trinity.explorer.bench.Bench`` does the evaluation);
Ray starts only when ``explorer.rollout_model.engine_num > 1`` needs engine actors.
"""

from __future__ import annotations

import sys
from typing import Any

from trinity.config import Config
from trinity.config import job_dir as get_job_dir
from trinity.launch.errors import RunError
from trinity.launch.summary import eval_accuracy
from trinity.utils.environment import scoped_environment


def run_bench(config: Config) -> dict[str, Any]:
    """Mode bench: evaluate the base model and the run's checkpoints, in this process.

    One metric row per evaluated model goes to the monitor run ``<name>_bench`` (see
    ``trinity.explorer.bench``). Ray is started only when extra engines need actors.
    """
    from trinity.config import to_dict
    from trinity.explorer.bench import Bench
    from trinity.monitor import make_monitor
    from trinity.rollout.model_path import resolve_model_path

    job_dir = get_job_dir(config)
    if not job_dir.is_dir():
        raise RunError(
            f"mode bench evaluates the checkpoints in {job_dir}, which does not exist; "
            "set checkpoint_root_dir, project and name to those of the run to evaluate"
        )
    (job_dir / "log").mkdir(exist_ok=True)
    model_dir = str(resolve_model_path(config.model.model_path))
    if config.explorer.rollout_model.engine_num > 1:
        from trinity.launch.cluster import connect, torch_work_overlaps

        connect(
            config.cluster.ray_address,
            config.ray_namespace,
            overlapping=torch_work_overlaps(config),
        )
    monitor = make_monitor(
        config.monitor.monitor_type,
        project=config.project,
        name=config.name,
        role="bench",
        job_dir=job_dir,
        monitor_args=config.monitor.monitor_args,
        config_dict=to_dict(config),
    )
    try:
        # the bench's runners are threads of this process: explorer.env_vars are set
        # here while it runs, and the environment is restored after
        with scoped_environment(config.explorer.env_vars):
            bench = Bench(config, job_dir, model_dir, monitor)
            try:
                rows = bench.run()
            finally:
                bench.close()
    finally:
        monitor.close()
    for step, metrics in rows.items():
        accuracy = eval_accuracy(metrics)
        shown = f"{accuracy:.3f}" if accuracy is not None else "n/a"
        print(f"[trinity] bench step {step}: eval accuracy {shown}", file=sys.stderr)
    return {"job_dir": str(job_dir), "bench_steps": list(rows), "bench": rows}
