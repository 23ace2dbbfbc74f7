"""Following a stage from the driver: wait for the actors' ``run`` calls and draw the
progress bar from the synchronizer's status (step, reward, loss, eval accuracy).

An actor's failure surfaces here at once: ``ray.get`` re-raises it as a ``RayError``,
which becomes a :class:`RunError` carrying the actor's exception and traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity.launch.errors import RunError


def follow(
    refs: dict[str, Any], synchronizer, total_steps: int, lead: str, job_dir: Path
) -> dict[str, Any]:
    """Wait for the actors, drawing progress (the ``lead`` role's steps) from the synchronizer;
    a failure names where the actors' logs are."""
    import ray

    from trinity.monitor.progress import Progress

    progress = Progress(total_steps, "train" if lead == "trainer" else "explore")
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
            leader = status["roles"].get(lead)
            step = leader["step"] if leader else 0
            if step != last_step:
                postfix = {}
                if explorer:
                    postfix["reward"] = explorer["metrics"].get("rollout/reward/mean", float("nan"))
                if trainer:
                    metrics = trainer["metrics"]
                    postfix["loss"] = metrics.get(
                        "actor/pg_loss", metrics.get("actor/loss", float("nan"))
                    )
                evals = status["roles"].get("eval")
                if evals:
                    acc = [v for k, v in evals["metrics"].items() if k.endswith("/accuracy/mean")]
                    if acc:
                        postfix["eval_acc"] = acc[0]
                progress.update(step, **postfix)
                last_step = step
    except ray.exceptions.RayError as exc:
        raise RunError(
            f"an actor failed: {exc}\n(the actors' logs: {job_dir / 'log'}; their stdout and "
            f"stderr: {_ray_logs_dir()})"
        ) from exc
    finally:
        progress.close()
    return {name: ray.get(ref) for name, ref in refs.items()}


def _ray_logs_dir() -> str:
    """Where Ray keeps this session's worker files (``worker-*.out`` and ``.err``)."""
    try:
        from ray._private.worker import _global_node

        return _global_node.get_logs_dir_path()
    except Exception:  # a private helper that moved, or no node: Ray's usual place
        return "/tmp/ray/session_latest/logs"
