"""An explorer of a split run waits for new weights only while the trainer is alive."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trinity.sync.weights import TRAINER_STATUS, set_trainer_status, trainer_running


def test_running_and_finished(tmp_path: Path) -> None:
    assert not trainer_running(tmp_path)  # no trainer has started
    set_trainer_status(tmp_path, "running")
    assert trainer_running(tmp_path)  # this process is alive
    set_trainer_status(tmp_path, "finished")
    assert not trainer_running(tmp_path)


def test_a_crashed_trainer_on_this_host_is_not_waited_for(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    set_trainer_status(tmp_path, "running")
    status = json.loads((tmp_path / TRAINER_STATUS).read_text())
    (tmp_path / TRAINER_STATUS).write_text(json.dumps({**status, "pid": int(dead.stdout)}))
    assert not trainer_running(tmp_path)
    # on another host the process cannot be checked: the status is trusted
    (tmp_path / TRAINER_STATUS).write_text(
        json.dumps({**status, "pid": int(dead.stdout), "host": "elsewhere"})
    )
    assert trainer_running(tmp_path)
