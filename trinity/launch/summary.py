"""The end of a stage: plots, the HTML report and what the terminal shows.

``summarise`` writes ``monitor/summary.png`` and ``monitor/report.html``, prints where the
checkpoints, the final policy and the plots are, the best eval score and the last value
of the headline metrics, and last ``eval accuracy: <start> -> <end>`` on stdout.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

logger = logging.getLogger("trinity.launch")

# metrics the end-of-run summary shows, when the run logged them
SUMMARY_KEYS = (
    "rollout/reward/mean",
    "rollout/response_length/mean",
    "actor/pg_loss",
    "actor/entropy",
    "actor/grad_norm",
    "time/explore_step",
    "time/train_step",
)


def eval_accuracy(metrics: dict[str, float] | None) -> float | None:
    """The first ``eval/<taskset>/accuracy/mean`` of ``metrics`` (None: no eval ran)."""
    if not metrics:
        return None
    values = [
        v for k, v in metrics.items() if k.startswith("eval/") and k.endswith("/accuracy/mean")
    ]
    return values[0] if values else None


def summarise(job_dir: Path, results: dict[str, Any], model_dir: str) -> dict[str, Any]:
    """Write the plots and print the summary of a stage whose actors returned ``results``
    (by role); returns the summary ``trinity run`` hands back."""
    from trinity.monitor.plots import write_html_report, write_plots
    from trinity.trainer import checkpoint as ckpt

    plots: list[Path] = []
    try:
        plots = write_plots(job_dir)
        plots.append(write_html_report(job_dir, pngs=plots))
    except (FileNotFoundError, ValueError) as exc:
        logger.warning("no plots written: %s", exc)
    explorer = results.get("explorer", {})
    trainer = results.get("trainer", {})
    start, end = (
        eval_accuracy(explorer.get("first_eval")),
        eval_accuracy(explorer.get("last_eval")),
    )
    latest = ckpt.read_latest(job_dir)
    summary = {
        "job_dir": str(job_dir),
        "steps": trainer.get("steps", explorer.get("steps")),
        "latest_checkpoint": str(ckpt.step_dir(job_dir, latest)) if latest else None,
        "plots": [str(p) for p in plots],
        "eval_accuracy_start": start,
        "eval_accuracy_end": end,
        "final_model_dir": trainer.get("final_model_dir") or model_dir,
    }
    print(
        f"[trinity] finished {summary['steps']} steps; checkpoints: {summary['latest_checkpoint']}",
        file=sys.stderr,
    )
    if trainer.get("final_model_dir"):
        print(f"[trinity] final policy: {trainer['final_model_dir']}", file=sys.stderr)
    for p in plots:
        print(f"[trinity] wrote {p}", file=sys.stderr)
    for line in final_metric_lines(job_dir):
        print(f"[trinity] {line}", file=sys.stderr)
    if start is not None and end is not None:
        print(f"eval accuracy: {start:.3f} -> {end:.3f}")
    return summary


def final_metric_lines(job_dir: Path) -> list[str]:
    """Best eval score (with its step) and the last value of the headline metrics."""
    from trinity.monitor.jsonl import metric_files, read_metrics

    best: dict[str, tuple[float, int]] = {}
    final: dict[str, float] = {}
    for path in metric_files(job_dir / "monitor"):
        for row in read_metrics(path):
            step = int(row.get("step", 0))
            for key, value in row.items():
                if key.startswith("eval/") and key.endswith("/accuracy/mean"):
                    if key not in best or value > best[key][0]:
                        best[key] = (value, step)
                if key in SUMMARY_KEYS:
                    final[key] = value
    lines = [
        f"best {key}: {value:.4g} at step {step}" for key, (value, step) in sorted(best.items())
    ]
    if final:
        lines.append(
            "final " + ", ".join(f"{k}={final[k]:.4g}" for k in SUMMARY_KEYS if k in final)
        )
    return lines
