"""``--plugin-dir``: modules imported in the driver and in every actor of the run.

That a run's actors use a plugin's part is checked by the asynchronous run of
``tests/e2e/test_async_sync.py``, whose trainer actor uses a plugin advantage function.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cli_testing import run_cli, write_plugin

from trinity.launch.run import PluginError, load_plugins


def test_plugin_modules_register_their_parts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trinity.algorithm import ADVANTAGE_FN, build

    # the registry is process-wide: the plugin's part stays in this test
    monkeypatch.setattr(ADVANTAGE_FN, "_items", dict(ADVANTAGE_FN._items))
    directory = write_plugin(tmp_path / "plugins", "unit")
    try:
        names = load_plugins([directory])
        assert names == ["trinity_plugin_constant_advantage_unit"]
        assert "constant_advantage_unit" in ADVANTAGE_FN
        # importing again (as each actor of a run does) registers nothing twice
        assert load_plugins([directory]) == names
        fn = build(ADVANTAGE_FN, "constant_advantage_unit", {"value": 0.5})
        assert fn.args.value == 0.5
    finally:
        sys.modules.pop("trinity_plugin_constant_advantage_unit", None)


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
    result = run_cli(
        "run",
        "--config",
        "examples/grpo/grpo.yaml",
        "--dry-run",
        "--plugin-dir",
        str(tmp_path / "nope"),
        timeout=120,
    )
    assert result.returncode != 0
    assert "is not a directory" in result.stderr and "Traceback" not in result.stderr
