"""``trinity run``: set up a run, start its actors on Ray, follow it, summarise it.

    setup:   resolve the model (GGUF conversion happens once, here), count steps,
             create the job directory, connect to Ray
    loop:    explorer and trainer actors run their own loops; this process polls the
             synchronizer for progress and draws the progress bar
    cleanup: plots, HTML report, summary, ``eval accuracy: <start> -> <end>``
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from trinity.config import Config, expand_stages, job_dir as get_job_dir, to_yaml

logger = logging.getLogger("trinity.launch")

from trinity.utils.resources import EXPLORER_CPUS, SERVICE_CPUS, TRAINER_CPUS


class RunError(RuntimeError):
    """The run could not start or one of its actors failed."""


def count_steps(config: Config) -> int:
    """Explore/train steps of a stage: total_steps if given, else epochs x batches."""
    if config.buffer.total_steps:
        return int(config.buffer.total_steps)
    if config.trainer.total_steps:
        return int(config.trainer.total_steps)
    from trinity.explorer.explorer import make_taskset_reader

    taskset = config.buffer.explorer_input.taskset
    if taskset is None:
        raise RunError("cannot count steps: set buffer.total_steps or buffer.explorer_input.taskset")
    reader = make_taskset_reader(config, taskset, batch_size=config.buffer.batch_size, is_eval=False)
    return len(reader)


def run(config: Config) -> list[dict[str, Any]]:
    """Run every stage of ``config`` in order; each starts from the previous stage's weights."""
    results = []
    previous_model: str | None = None
    for stage in expand_stages(config, now=datetime.now()):
        if previous_model is not None:
            stage = replace(stage, model=replace(stage.model, model_path=previous_model))
        result = run_stage(stage)
        results.append(result)
        previous_model = result.get("final_model_dir") or previous_model
    return results


def run_stage(config: Config) -> dict[str, Any]:
    import ray

    from trinity.launch.cluster import connect
    from trinity.launch.roles import ExplorerRole, TrainerRole
    from trinity.models.resolve import resolve_model_path
    from trinity.sync.synchronizer import Synchronizer

    if config.mode != "both":
        raise RunError(
            f"mode '{config.mode}' cannot run yet: this version runs mode 'both' (explorer and trainer together)"
        )
    job_dir = get_job_dir(config)
    for sub in ("log", "monitor", "buffer"):
        (job_dir / sub).mkdir(parents=True, exist_ok=True)
    (job_dir / "config.yaml").write_text(to_yaml(config))
    model_dir = str(resolve_model_path(config.model.model_path))
    total_steps = count_steps(config)
    print(f"[trinity] run '{config.project}/{config.name}': {total_steps} steps, job dir {job_dir}", file=sys.stderr)

    how = connect(config.cluster.ray_address, config.ray_namespace)
    print(f"[trinity] ray: {how} ({ray.cluster_resources().get('CPU', 0):.0f} CPUs)", file=sys.stderr)
    exp_buf = config.buffer.trainer_input.experience_buffer
    synchronizer = ray.remote(Synchronizer).options(num_cpus=SERVICE_CPUS).remote()
    buffer = (
        ray.remote(_BufferActor)
        .options(num_cpus=SERVICE_CPUS, max_concurrency=16, name=exp_buf.name)
        .remote(exp_buf)
    )
    trainer = (
        ray.remote(TrainerRole)
        .options(num_cpus=TRAINER_CPUS, max_concurrency=2, name=config.trainer.name)
        .remote(config, str(job_dir), model_dir, buffer, synchronizer, total_steps)
    )
    explorer = (
        ray.remote(ExplorerRole)
        .options(num_cpus=EXPLORER_CPUS, max_concurrency=2, name=config.explorer.name)
        .remote(config, str(job_dir), model_dir, buffer, synchronizer)
    )
    refs = {"explorer": explorer.run.remote(total_steps), "trainer": trainer.run.remote(total_steps)}
    results = _follow(refs, synchronizer, total_steps)
    ray.get(explorer.close.remote())
    for actor in (explorer, trainer, buffer, synchronizer):
        ray.kill(actor)
    return _summarise(config, job_dir, results, model_dir)


class _BufferActor:
    """The experience buffer (queue, priority queue, sql or file) as a threaded actor."""

    def __init__(self, storage) -> None:
        from trinity.buffer import make_experience_buffer

        self.queue = make_experience_buffer(storage)

    def put(self, experiences):
        self.queue.put(experiences)

    def get(self, n: int, timeout: float | None):
        """Up to ``n`` experiences; an empty list once the queue is closed and drained."""
        from trinity.buffer.errors import QueueClosed

        try:
            return self.queue.get(n, timeout)
        except QueueClosed:
            return []

    def close(self) -> None:
        self.queue.close()


def _follow(refs: dict[str, Any], synchronizer, total_steps: int) -> dict[str, Any]:
    """Wait for the actors, drawing progress from the synchronizer's status board."""
    import ray

    from trinity.monitor.progress import Progress

    progress = Progress(total_steps, "train")
    pending = list(refs.values())
    last_step = 0
    try:
        while pending:
            done, pending = ray.wait(pending, timeout=1.0)
            for ref in done:
                ray.get(ref)  # re-raise an actor's failure at once
            status = ray.get(synchronizer.get_status.remote())
            trainer = status["roles"].get("trainer")
            explorer = status["roles"].get("explorer")
            step = trainer["step"] if trainer else 0
            if step != last_step:
                postfix = {}
                if explorer:
                    postfix["reward"] = explorer["metrics"].get("rollout/reward/mean", float("nan"))
                if trainer:
                    postfix["loss"] = trainer["metrics"].get("actor/pg_loss", float("nan"))
                evals = status["roles"].get("eval")
                if evals:
                    acc = [v for k, v in evals["metrics"].items() if k.endswith("/accuracy/mean")]
                    if acc:
                        postfix["eval_acc"] = acc[0]
                progress.update(step, **postfix)
                last_step = step
    except ray.exceptions.RayError as exc:
        raise RunError(f"an actor failed: {exc}") from exc
    finally:
        progress.close()
    return {name: ray.get(ref) for name, ref in refs.items()}


def _eval_accuracy(metrics: dict[str, float] | None) -> float | None:
    if not metrics:
        return None
    values = [v for k, v in metrics.items() if k.startswith("eval/") and k.endswith("/accuracy/mean")]
    return values[0] if values else None


def _summarise(config: Config, job_dir: Path, results: dict[str, Any], model_dir: str) -> dict[str, Any]:
    from trinity.monitor.plots import write_html_report, write_plots
    from trinity.trainer import checkpoint as ckpt

    plots: list[Path] = []
    try:
        plots = write_plots(job_dir)
        plots.append(write_html_report(job_dir))
    except (FileNotFoundError, ValueError) as exc:
        logger.warning("no plots written: %s", exc)
    explorer = results.get("explorer", {})
    start, end = _eval_accuracy(explorer.get("first_eval")), _eval_accuracy(explorer.get("last_eval"))
    latest = ckpt.read_latest(job_dir)
    summary = {
        "job_dir": str(job_dir),
        "steps": results.get("trainer", {}).get("steps"),
        "latest_checkpoint": str(ckpt.step_dir(job_dir, latest)) if latest else None,
        "plots": [str(p) for p in plots],
        "eval_accuracy_start": start,
        "eval_accuracy_end": end,
        "final_model_dir": model_dir,
    }
    print(f"[trinity] finished {summary['steps']} steps; checkpoints: {summary['latest_checkpoint']}", file=sys.stderr)
    for p in plots:
        print(f"[trinity] wrote {p}", file=sys.stderr)
    if start is not None and end is not None:
        print(f"eval accuracy: {start:.3f} -> {end:.3f}")
    return summary
