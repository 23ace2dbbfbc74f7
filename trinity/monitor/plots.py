"""Plots and an HTML report of a run, from its jsonl metric files.

Reads ``<job_dir>/monitor/*_metrics.jsonl`` (the explorer and trainer runs) and writes
``summary.png`` and ``report.html`` next to them::

    python -c "from trinity.monitor.plots import write_html_report; print(write_html_report('JOB_DIR'))"

Metric keys, as the modules emit them (docs/metrics.md lists every one):

explorer run (``<name>_explorer``)
    ``rollout/reward/mean``, ``rollout/reward/std``     total reward of the rollouts
    ``rollout/accuracy/mean``                          fraction judged correct
    ``rollout/response_length/mean``                   response tokens per rollout
    ``eval/<taskset>/accuracy/mean``                   eval accuracy (``.../mean@<k>``,
    ``eval/<taskset>/reward/mean``                     ``best@<k>``, ``worst@<k>`` too)
    ``time/explore_step``                              seconds per explore step
trainer run (``<name>_trainer``)
    ``actor/pg_loss``, ``actor/kl_loss``, ``actor/entropy``, ``actor/pg_clipfrac``,
    ``actor/ppo_kl``, ``actor/grad_norm``, ``actor/lr``, ``time/train_step``

Each summary panel selects keys with ``fnmatch`` patterns (``DEFAULT_PANELS``; pass
your own ``panels`` to change them); a panel that matches no key is left out.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from pathlib import Path

from trinity.monitor.base import format_value
from trinity.monitor.jsonl import metric_files, read_metrics, run_name_of

SUMMARY_NAME = "summary.png"
REPORT_NAME = "report.html"
MAX_LINES_PER_PANEL = 8  # more lines than this make a panel unreadable


@dataclass(frozen=True)
class Panel:
    """One subplot: every metric whose key matches one of ``patterns``, against step."""

    title: str
    patterns: tuple[str, ...]


DEFAULT_PANELS: tuple[Panel, ...] = (
    Panel("eval accuracy", ("eval/*/accuracy/mean", "eval/*/accuracy/mean@*")),
    Panel("reward", ("rollout/reward/mean", "eval/*/reward/mean", "*reward*/mean")),
    Panel("loss", ("actor/pg_loss", "actor/loss", "critic/vf_loss")),
    Panel("KL", ("actor/kl_loss", "actor/ppo_kl")),
    Panel("entropy", ("actor/entropy",)),
    Panel("response length", ("rollout/response_length/mean",)),
    Panel("step time (s)", ("time/step", "time/explore_step", "time/train_step")),
)


@dataclass(frozen=True)
class Series:
    """One metric of one run: ``steps`` ascending, ``values`` aligned with them."""

    run: str
    key: str
    steps: tuple[int, ...]
    values: tuple[float, ...]


def load_series(monitor_dir: Path) -> list[Series]:
    """Every metric of every run in ``monitor_dir``; a repeated step keeps its last value."""
    files = metric_files(monitor_dir)
    if not files:
        raise FileNotFoundError(
            f"no '*_metrics.jsonl' files in {monitor_dir}; they are written by every run "
            "that logs metrics (check the job directory, <checkpoint_root_dir>/<project>/<name>)"
        )
    series: list[Series] = []
    for path in files:
        by_key: dict[str, dict[int, float]] = {}
        for record in read_metrics(path):
            step = int(record["step"])
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    by_key.setdefault(key, {})[step] = float(value)
        run = run_name_of(path)
        for key in sorted(by_key):
            points = sorted(by_key[key].items())
            series.append(
                Series(run, key, tuple(s for s, _ in points), tuple(v for _, v in points))
            )
    return series


def plan_panels(
    keys: Iterable[str], panels: Sequence[Panel] = DEFAULT_PANELS
) -> list[tuple[Panel, list[str]]]:
    """The panels that have data and their keys, in pattern order, at most 8 per panel."""
    keys = list(dict.fromkeys(keys))
    plan = []
    for panel in panels:
        chosen: list[str] = []
        for pattern in panel.patterns:
            chosen += [k for k in keys if fnmatchcase(k, pattern) and k not in chosen]
        if chosen:
            plan.append((panel, chosen[:MAX_LINES_PER_PANEL]))
    return plan


def write_plots(
    job_dir: Path, out_dir: Path | None = None, panels: Sequence[Panel] = DEFAULT_PANELS
) -> list[Path]:
    """Write ``summary.png`` into ``out_dir`` (default ``<job_dir>/monitor``).

    Returns the written files: ``[summary.png]``, or ``[]`` if no panel has data.
    Raises ``FileNotFoundError`` when the run has no metric files at all.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    job_dir = Path(job_dir)
    out_dir = Path(out_dir) if out_dir is not None else job_dir / "monitor"
    series = load_series(job_dir / "monitor")
    plan = plan_panels((s.key for s in series), panels)
    if not plan:
        return []
    runs_per_key: dict[str, int] = {}
    for s in series:
        runs_per_key[s.key] = runs_per_key.get(s.key, 0) + 1

    ncols = min(3, len(plan))
    nrows = math.ceil(len(plan) / ncols)
    # A standalone Figure on the Agg canvas leaves pyplot's global backend untouched.
    fig = Figure(figsize=(5.0 * ncols, 3.4 * nrows))
    FigureCanvasAgg(fig)
    fig.suptitle(f"{job_dir.parent.name}/{job_dir.name}")
    for index, (panel, keys) in enumerate(plan):
        ax = fig.add_subplot(nrows, ncols, index + 1)
        for s in (s for key in keys for s in series if s.key == key):
            # Infinite values would wreck the axis limits; NaN leaves a gap instead.
            values = [v if math.isfinite(v) else math.nan for v in s.values]
            label = f"{s.run}: {s.key}" if runs_per_key[s.key] > 1 else s.key
            ax.plot(s.steps, values, marker="o" if len(values) <= 30 else None, ms=3, label=label)
        ax.set_title(panel.title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    # margins fixed in inches: a layout engine measures every label first, a second pass
    # over the figure that took as long as drawing it
    width, height = fig.get_size_inches()
    fig.subplots_adjust(
        left=0.65 / width,
        right=1 - 0.15 / width,
        bottom=0.5 / height,
        top=1 - 0.75 / height,
        wspace=0.3,
        hspace=0.45,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / SUMMARY_NAME
    fig.savefig(path, dpi=100)
    return [path]


def final_metrics(series: Iterable[Series]) -> list[tuple[str, str, int, float]]:
    """``(run, key, last step, value at that step)`` for each metric."""
    return [(s.run, s.key, s.steps[-1], s.values[-1]) for s in series if s.steps]


def write_html_report(
    job_dir: Path, panels: Sequence[Panel] = DEFAULT_PANELS, pngs: Sequence[Path] | None = None
) -> Path:
    """Write ``<job_dir>/monitor/report.html``: the summary figure and the final metrics.

    The file is self-contained (the PNG is embedded as base64), so it can be mailed or
    attached to a CI run. ``pngs``: what ``write_plots`` just returned, so the figure is
    not drawn a second time (drawing it takes seconds); by default it is drawn here.
    """
    job_dir = Path(job_dir)
    monitor_dir = job_dir / "monitor"
    if pngs is None:
        pngs = write_plots(job_dir, monitor_dir, panels)
    rows = final_metrics(load_series(monitor_dir))

    title = html.escape(f"{job_dir.parent.name}/{job_dir.name}")
    if pngs:
        data = base64.b64encode(pngs[0].read_bytes()).decode("ascii")
        figure = f'<img alt="summary" src="data:image/png;base64,{data}">'
    else:
        figure = "<p>No metric matches a summary panel.</p>"
    table_rows = "\n".join(
        f"<tr><td>{html.escape(run)}</td><td>{html.escape(key)}</td>"
        f"<td>{step}</td><td>{html.escape(format_value(value))}</td></tr>"
        for run, key, step, value in rows
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
img {{ max-width: 100%; }}
table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }}
td:nth-child(3), td:nth-child(4) {{ text-align: right; font-family: monospace; }}
</style></head>
<body>
<h1>{title}</h1>
<p>Generated {datetime.now():%Y-%m-%d %H:%M:%S} from {html.escape(str(monitor_dir))}</p>
{figure}
<h2>Final metrics</h2>
<table>
<tr><th>run</th><th>metric</th><th>step</th><th>value</th></tr>
{table_rows}
</table>
</body></html>
"""
    path = monitor_dir / REPORT_NAME
    path.write_text(page, encoding="utf-8")
    return path
