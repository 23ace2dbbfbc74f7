"""Ctrl-C during ``trinity run``: one line saying where the checkpoints are, exit 130,
no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity.cli import main as cli


def test_an_interrupted_run_says_where_its_checkpoints_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import trinity.launch.run as launch

    def interrupted(config, plugin_dirs=()):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "run", interrupted)
    monkeypatch.setattr("trinity.launch.process_policy.apply_to_driver", lambda: None)
    code = cli.main(
        [
            "run",
            "--config",
            str(Path(__file__).parents[3] / "examples" / "arithmetic" / "grpo.yaml"),
            f"checkpoint_root_dir={tmp_path}",
            "name=stopped",
            "continue_from_checkpoint=true",
        ]
    )
    err = capsys.readouterr().err
    assert code == 130
    assert f"trinity: interrupted; {tmp_path}/trinity-demo/stopped keeps the checkpoints" in err
    assert "Traceback" not in err
