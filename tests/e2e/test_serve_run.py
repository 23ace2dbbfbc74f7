"""End to end: ``trinity run`` in mode serve, driven as an agent program would drive it.

The run serves the tiny model on a port the server picks (port 0, read back from the
line it prints), the ``openai`` client asks it, ``/feedback`` scores the replies (with
Trinity-RFT's body: ``reward``, ``msg_ids``, ``task_id``), ``/commit`` writes some, and
SIGTERM stops the run, which commits the rest before it exits. The experiences are then
read back from the configured SQLite experience buffer. No Ray is started.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml
from cli_testing import run_cli

from trinity.buffer.sql_storage import SQLExperienceStorage

SERVING = re.compile(r"serving (\S+) at (http://\S+/v1)")


def _serve_config(tmp_path: Path, model_dir: Path, db: Path) -> Path:
    config = {
        "mode": "serve",
        "project": "serve-e2e",
        "name": "run",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "model": {"model_path": str(model_dir), "max_model_len": 256, "dtype": "float32"},
        "buffer": {
            "trainer_input": {
                "experience_buffer": {
                    "name": "serve_buffer",
                    "storage_type": "sql",
                    "path": f"sqlite:///{db}",
                }
            }
        },
    }
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _wait_for_url(proc: subprocess.Popen, deadline: float) -> tuple[str, str]:
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:  # the run exited before serving
            break
        seen.append(line)
        match = SERVING.search(line)
        if match:
            return match.group(1), match.group(2)
    raise AssertionError("the run did not report its URL:\n" + "".join(seen))


def _start(config: Path, tmp_path: Path) -> subprocess.Popen:
    """``trinity run`` of ``config`` with its output on one pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "trinity", "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HOME": str(tmp_path / "home")},
    )


def _ask_twice(proc: subprocess.Popen, first_n: int) -> tuple[str, Any, Any]:
    """Once the run serves: two chat completions through the ``openai`` client, the
    first with ``first_n`` choices; returns the server's root URL and both replies."""
    name, base_url = _wait_for_url(proc, time.monotonic() + 120)
    client = openai.OpenAI(base_url=base_url, api_key="EMPTY")
    asked = [{"role": "user", "content": "Say hi."}]
    first = client.chat.completions.create(model=name, messages=asked, max_tokens=4, n=first_n)
    second = client.chat.completions.create(model=name, messages=asked, max_tokens=4)
    return base_url.removesuffix("/v1"), first, second


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_serve_run_turns_scored_calls_into_buffer_rows(tiny_model_dir: Path, tmp_path: Path):
    db = tmp_path / "buffer.db"
    config = _serve_config(tmp_path, tiny_model_dir, db)
    proc = _start(config, tmp_path)
    try:
        root, first, second = _ask_twice(proc, first_n=2)
        assert httpx.get(f"{root}/health").status_code == 200
        scored = httpx.post(
            f"{root}/feedback", json={"reward": 0.5, "msg_ids": [first.id], "task_id": "agent-a"}
        )
        assert scored.json() == {"status": "success", "experiences": 2}
        assert httpx.post(f"{root}/commit").json() == {"status": "success", "experiences": 2}
        # scored but not committed: the shutdown commits it
        httpx.post(f"{root}/feedback", json={"reward": 1.0, "msg_ids": [second.id]})
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        _stop(proc)
    assert proc.returncode == 0, out
    assert "committed 1 experiences" in out
    rows = SQLExperienceStorage(f"sqlite:///{db}").read(10)
    assert sorted(e.reward for e in rows) == [0.5, 0.5, 1.0]
    # the rows hold the replies the client got, grouped by the feedback's task_id
    texts = [c.message.content for c in first.choices + second.choices]
    assert sorted(e.response_text for e in rows) == sorted(texts)
    assert sorted(str(e.eid.task) for e in rows if e.reward == 0.5) == ["agent-a", "agent-a"]


def test_scored_calls_outlive_a_kill_of_the_serve_process(tiny_model_dir: Path, tmp_path: Path):
    """/feedback answers once its experiences are on disk: after SIGKILL, the run started
    again on the same job directory commits them."""
    db = tmp_path / "buffer.db"
    config = _serve_config(tmp_path, tiny_model_dir, db)
    proc = _start(config, tmp_path)
    try:
        root, first, second = _ask_twice(proc, first_n=1)
        httpx.post(f"{root}/feedback", json={"reward": 0.5, "msg_ids": [first.id]})
        assert httpx.post(f"{root}/commit").json()["experiences"] == 1
        scored = httpx.post(f"{root}/feedback", json={"reward": 1.0, "msg_ids": [second.id]})
        assert scored.json() == {"status": "success", "experiences": 1}
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        _stop(proc)
    assert [e.reward for e in SQLExperienceStorage(f"sqlite:///{db}").read(10)] == [0.5]
    again = _start(config, tmp_path)
    try:
        _wait_for_url(again, time.monotonic() + 120)
        again.send_signal(signal.SIGTERM)
        out, _ = again.communicate(timeout=30)
    finally:
        _stop(again)
    assert again.returncode == 0, out
    assert "committed 1 experiences" in out
    rows = SQLExperienceStorage(f"sqlite:///{db}").read(10)
    # the committed call once, the scored one recovered, nothing twice
    assert sorted(e.reward for e in rows) == [0.5, 1.0]
    recovered = next(e for e in rows if e.reward == 1.0)
    assert recovered.response_text == second.choices[0].message.content
    assert recovered.info["msg_id"] == second.id


def test_a_queue_buffer_is_refused_for_serve_at_dry_run(tiny_model_dir: Path, tmp_path: Path):
    config = _serve_config(tmp_path, tiny_model_dir, tmp_path / "buffer.db")
    data = yaml.safe_load(config.read_text())
    data["buffer"]["trainer_input"]["experience_buffer"] = {"name": "q", "storage_type": "queue"}
    config.write_text(yaml.safe_dump(data))
    result = run_cli("run", "--config", str(config), "--dry-run")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert "buffer.trainer_input.experience_buffer.storage_type" in line
    assert "'queue'" in line and "sql" in line and "file" in line
