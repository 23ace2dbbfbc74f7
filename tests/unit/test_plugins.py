"""``--plugin-dir``: modules imported in the driver and in every actor of the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trinity.launch.run import PluginError, load_plugins

REPO = Path(__file__).resolve().parents[2]

# A plugin advantage function: every valid token gets the same advantage ``value``.
CONSTANT_ADVANTAGE = textwrap.dedent(
    """
    from dataclasses import dataclass

    from trinity.algorithm.advantage.base import AdvantageFn
    from trinity.algorithm.registries import ADVANTAGE_FN


    @ADVANTAGE_FN.register("constant_advantage_{tag}")
    class ConstantAdvantage(AdvantageFn):
        @dataclass
        class Args:
            value: float = 1.0

        def compute(self, inputs):
            advantages = self.args.value * inputs.mask
            return advantages, advantages.clone()
    """
)


def write_plugin(directory: Path, tag: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"constant_advantage_{tag}.py").write_text(
        CONSTANT_ADVANTAGE.replace("{tag}", tag)
    )
    return directory


def test_plugin_modules_register_their_parts_once(tmp_path: Path) -> None:
    from trinity.algorithm import ADVANTAGE_FN, build

    directory = write_plugin(tmp_path / "plugins", "unit")
    names = load_plugins([directory])
    assert names == ["trinity_plugin_constant_advantage_unit"]
    assert "constant_advantage_unit" in ADVANTAGE_FN
    # importing again (as each actor of a run does) registers nothing twice
    assert load_plugins([directory]) == names
    fn = build(ADVANTAGE_FN, "constant_advantage_unit", {"value": 0.5})
    assert fn.args.value == 0.5


def test_plugin_errors_name_the_directory_or_module(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="is not a directory"):
        load_plugins([tmp_path / "missing"])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bad_plugin.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(
        PluginError, match="bad_plugin.py failed to import: RuntimeError\\('boom'\\)"
    ):
        load_plugins([broken])
    assert "trinity_plugin_bad_plugin" not in sys.modules


def test_cli_reports_a_bad_plugin_dir(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trinity",
            "run",
            "--config",
            "examples/grpo/grpo.yaml",
            "--dry-run",
            "--plugin-dir",
            str(tmp_path / "nope"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "is not a directory" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_plugin_advantage_is_used_inside_the_trainer_actor(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    plugins = write_plugin(tmp_path / "plugins", "run")
    overrides = [
        f"model.model_path={tiny_model_dir}",
        f"checkpoint_root_dir={tmp_path}",
        "name=plugin",
        "continue_from_checkpoint=true",
        "buffer.total_steps=1",
        "buffer.batch_size=2",
        "algorithm.repeat_times=2",
        "model.max_response_tokens=8",
        "buffer.explorer_input.eval_tasksets=[]",
        "explorer.eval_on_startup=false",
        "explorer.runner_per_model=4",
        "algorithm.advantage_fn=constant_advantage_run",
        "algorithm.advantage_fn_args={value: 0.25}",
        f"buffer.trainer_input.experience_buffer.path=sqlite:///{tmp_path}/buffer.db",
    ]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trinity",
            "run",
            "--config",
            "examples/arithmetic/grpo.yaml",
            "--plugin-dir",
            str(plugins),
            *overrides,
        ],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    job = tmp_path / "trinity-demo" / "plugin"
    [row] = [
        json.loads(x)
        for x in (job / "monitor" / "plugin_trainer_metrics.jsonl").read_text().splitlines()
    ]
    # GRPO would give 0 here (the tiny model earns no reward): the plugin's 0.25 it is
    assert row["critic/advantages/mean"] == pytest.approx(0.25)
    assert row["critic/advantages/max"] == pytest.approx(0.25)
