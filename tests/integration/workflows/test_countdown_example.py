"""examples/countdown: the generated tasks are solvable, the config passes --dry-run."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path

from trinity.rewards.countdown import countdown_reward

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "countdown"


def solve(numbers: list[int], target: int) -> str | None:
    """A left-to-right expression over all ``numbers`` (any order) equal to ``target``."""
    for order in itertools.permutations(numbers):
        for ops in itertools.product("+-*/", repeat=len(order) - 1):
            expr = str(order[0])
            for op, n in zip(ops, order[1:], strict=True):
                expr = f"({expr} {op} {n})"
            if countdown_reward(f"<answer>{expr}</answer>", {"numbers": numbers, "target": target})[
                "accuracy"
            ]:
                return expr
    return None


def test_generated_tasks_are_solvable(tmp_path):
    subprocess.run(
        [
            sys.executable,
            str(EXAMPLE / "make_data.py"),
            "--train",
            "30",
            "--test",
            "5",
            "--out",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and len((tmp_path / "test.jsonl").read_text().splitlines()) == 5
    for row in random.Random(0).sample(rows, 8):
        assert row["answer"] == {"numbers": row["nums"], "target": row["target"]}
        assert 1 <= row["target"] <= 100 and 3 <= len(row["nums"]) <= 4
        expr = solve(row["nums"], row["target"])
        assert expr is not None, row
        assert countdown_reward(f"<answer>{expr}</answer>", row["answer"]) == {
            "format": 0.1,
            "accuracy": 1.0,
        }


def test_shipped_data_matches_the_generator(tmp_path):
    subprocess.run(
        [sys.executable, str(EXAMPLE / "make_data.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for name in ("train.jsonl", "test.jsonl"):
        assert (tmp_path / name).read_text() == (EXAMPLE / "data" / name).read_text()


def test_config_passes_dry_run(tmp_path):
    env = {**os.environ, "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trinity",
            "run",
            "--config",
            str(EXAMPLE / "countdown.yaml"),
            "--dry-run",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "default_workflow_type: countdown_workflow" in result.stdout
    assert not (tmp_path / "ckpt").exists()  # a dry run writes nothing
