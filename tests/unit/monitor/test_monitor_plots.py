import base64
import json
import math
import re
from pathlib import Path

import pytest

from trinity.monitor.jsonl import metrics_path, read_metrics
from trinity.monitor.plots import (
    Panel,
    load_series,
    plan_panels,
    write_html_report,
    write_plots,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture
def job_dir(tmp_path) -> Path:
    """A finished 5-step run as the explorer and trainer monitors leave it."""
    job = tmp_path / "checkpoints" / "proj" / "exp"
    explorer = []
    for step in range(1, 6):
        record = {
            "step": step,
            "rollout/reward/mean": 0.1 * step,
            "rollout/reward/std": 0.3,
            "rollout/accuracy/mean": 0.1 * step,
            "rollout/response_length/mean": 100.0 - step,
            "time/explore_step": 2.0,
        }
        if step in (1, 5):
            record["eval/gsm8k/accuracy/mean"] = 0.2 if step == 1 else 0.6
        explorer.append(record)
    trainer = [
        {
            "step": step,
            "actor/pg_loss": math.nan if step == 3 else 1.0 / step,
            "actor/kl_loss": 0.001 * step,
            "actor/entropy": 2.0,
            "actor/grad_norm": math.inf if step == 2 else 1.0,
            "time/train_step": 3.0,
        }
        for step in range(1, 6)
    ]
    write_jsonl(job / "monitor" / "exp_explorer_metrics.jsonl", explorer)
    write_jsonl(job / "monitor" / "exp_trainer_metrics.jsonl", trainer)
    return job


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 10_000  # a multi-panel figure, not an empty canvas


def test_summary_png_is_written_next_to_the_metrics(job_dir):
    paths = write_plots(job_dir)
    assert paths == [job_dir / "monitor" / "summary.png"]
    assert_png(paths[0])


def test_a_stages_metrics_below_its_run_name_are_found(job_dir, tmp_path):
    # a stage's runs are named "<name>/<stage>": its metric files lie one directory down
    stage = tmp_path / "stage_job"
    for source in sorted((job_dir / "monitor").glob("*_metrics.jsonl")):
        role = source.name.removeprefix("exp_")
        target = metrics_path(
            stage / "monitor", f"stages/sft_{role}".removesuffix("_metrics.jsonl")
        )
        write_jsonl(target, [json.loads(line) for line in source.read_text().splitlines()])
    assert (stage / "monitor" / "stages" / "sft_trainer_metrics.jsonl").exists()
    paths = write_plots(stage)
    assert paths == [stage / "monitor" / "summary.png"]
    assert_png(paths[0])


def test_out_dir_is_honoured(job_dir, tmp_path):
    (path,) = write_plots(job_dir, out_dir=tmp_path / "figures")
    assert path == tmp_path / "figures" / "summary.png"
    assert_png(path)


def test_panels_pick_their_keys_and_empty_panels_are_left_out():
    keys = [
        "eval/gsm8k/accuracy/mean",
        "eval/gsm8k/accuracy/mean@4",
        "eval/gsm8k/reward/mean",
        "rollout/reward/mean",
        "rollout/reward/std",
        "actor/pg_loss",
        "actor/ppo_kl",
        "time/train_step",
    ]
    plan = {panel.title: chosen for panel, chosen in plan_panels(keys)}
    assert plan == {
        "eval accuracy": ["eval/gsm8k/accuracy/mean", "eval/gsm8k/accuracy/mean@4"],
        "reward": ["rollout/reward/mean", "eval/gsm8k/reward/mean"],
        "loss": ["actor/pg_loss"],
        "KL": ["actor/ppo_kl"],
        "step time (s)": ["time/train_step"],
    }


def test_custom_panels_without_matches_write_nothing(job_dir):
    assert write_plots(job_dir, panels=[Panel("value", ("critic/values/mean",))]) == []
    assert not (job_dir / "monitor" / "summary.png").exists()


def test_a_job_without_metric_files_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="_metrics.jsonl"):
        write_plots(tmp_path)


def test_a_resumed_run_keeps_the_later_value_of_a_repeated_step(tmp_path):
    path = tmp_path / "monitor" / "exp_trainer_metrics.jsonl"
    write_jsonl(path, [{"step": 1, "actor/lr": 1.0}, {"step": 2, "actor/lr": 2.0}])
    with open(path, "a") as f:  # the resumed run restarts at step 2
        f.write(json.dumps({"step": 2, "actor/lr": 5.0}) + "\n")
        f.write('{"step": 3, "actor/l')  # killed mid-write

    (series,) = load_series(tmp_path / "monitor")
    assert (series.run, series.key) == ("exp_trainer", "actor/lr")
    assert series.steps == (1, 2)
    assert series.values == (1.0, 5.0)
    assert len(read_metrics(path)) == 3


def test_html_report_embeds_the_summary_and_lists_final_metrics(job_dir):
    report = write_html_report(job_dir)
    assert report == job_dir / "monitor" / "report.html"
    page = report.read_text()

    (encoded,) = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    png = base64.b64decode(encoded)
    assert png == (job_dir / "monitor" / "summary.png").read_bytes()
    assert png[:8] == PNG_SIGNATURE
    # final values: reward 0.1 * 5 = 0.5 at step 5, eval accuracy 0.6 at step 5
    assert "<td>exp_explorer</td><td>rollout/reward/mean</td><td>5</td><td>0.5</td>" in page
    assert "<td>eval/gsm8k/accuracy/mean</td><td>5</td><td>0.6</td>" in page
    assert "<td>actor/pg_loss</td><td>5</td><td>0.2</td>" in page
    assert "<title>proj/exp</title>" in page


def test_html_report_embeds_the_figures_it_is_given_without_drawing_again(job_dir, tmp_path):
    # what `trinity run` does: write_plots once, then the report around its figure
    figure = tmp_path / "given.png"
    figure.write_bytes(PNG_SIGNATURE + b"not drawn by the report")
    report = write_html_report(job_dir, pngs=[figure])
    (encoded,) = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', report.read_text())
    assert base64.b64decode(encoded) == figure.read_bytes()
    assert not (job_dir / "monitor" / "summary.png").exists()
