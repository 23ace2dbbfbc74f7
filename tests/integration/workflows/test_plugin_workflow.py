"""The plugin example of docs/workflows.md works as written: loaded with load_plugins
(what ``--plugin-dir`` calls) and run through the runner pool."""

from __future__ import annotations

import re
from pathlib import Path

from workflow_testing import make_task, run_task

from trinity.launch.run import load_plugins

DOC = Path(__file__).resolve().parents[3] / "docs" / "workflows.md"


def test_documented_plugin_runs(tmp_path, pool, log_dir):
    code = re.search(
        r"```python\n(# my_plugins/short_answers.py\n.*?)```", DOC.read_text(), re.S
    ).group(1)
    (tmp_path / "short_answers.py").write_text(code)
    load_plugins([tmp_path])
    task = make_task(
        "short_answer_workflow",
        {"question": "Capital of France?", "answer": "Paris"},
        repeat_times=2,
    )
    exps = run_task(pool, task, log_dir)
    assert len(exps) == 2
    for exp in exps:
        assert exp.messages[-2]["content"].endswith("Answer in one word.")
        brevity = -0.001 * len(exp.response_text)
        assert exp.metrics["reward/brevity"] == brevity
        assert exp.reward == exp.metrics["reward/accuracy"] + brevity
