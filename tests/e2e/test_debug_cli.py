"""End to end: ``trinity debug`` serves a tiny model in one process and runs a plugin
workflow against it from another (the workflow talks to the model through the
``openai`` client), or runs the workflow with an engine of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trinity.buffer.jsonl import JsonlReader
from trinity.buffer.sql_storage import SQLExperienceStorage

REPO = Path(__file__).resolve().parents[2]

# agent-style workflow: two turns through the openai client, history -> experiences
PLUGIN = """
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS


@WORKFLOWS.register("openai_agent_workflow")
class OpenAIAgentWorkflow(Workflow):
    async def run_async(self):
        client = self.model.get_openai_client()
        messages = [{"role": "user", "content": self.task.prompt}]
        for follow_up in ("Check it once more.", None):
            reply = client.chat.completions.create(
                model=self.model.name, messages=messages, max_tokens=6, seed=self.task.index
            )
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
            if follow_up:
                messages.append({"role": "user", "content": follow_up})
        experiences = self.model.extract_experience_from_history(merge_turns=True)
        for exp in experiences:
            exp.reward = float(str(self.task.answer) in messages[-1]["content"])
        return experiences
"""

CONFIG = """
project: debug-test
name: {name}
checkpoint_root_dir: {root}
mode: explore
model:
  model_path: {model}
  max_prompt_tokens: 96
  max_response_tokens: 8
  dtype: float32
cluster: {{node_num: 1, gpu_per_node: 0}}
algorithm: {{algorithm_type: grpo, repeat_times: 2}}
explorer:
  rollout_model:
    enable_history: true
buffer:
  batch_size: 2
  explorer_input:
    taskset:
      name: sums
      storage_type: file
      path: {data}
      split: train
      format: {{prompt_key: question, response_key: answer}}
    default_workflow_type: {workflow}
  trainer_input:
    experience_buffer: {{name: debug_buffer, storage_type: queue}}
"""


def _setup(tmp_path: Path, model: Path, workflow: str) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"question": f"What is {a} + {a}?", "answer": str(2 * a)} for a in range(1, 4)]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "agent.py").write_text(PLUGIN)
    config = tmp_path / "config.yaml"
    config.write_text(
        CONFIG.format(name="dbg", root=tmp_path / "ckpt", model=model, data=data, workflow=workflow)
    )
    return config


def _debug(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trinity", "debug", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_workflow_runs_against_the_served_inference_model(tiny_model_dir, tmp_path):
    config = _setup(tmp_path, tiny_model_dir, "openai_agent_workflow")
    address_file = tmp_path / "ckpt" / "debug-test" / "dbg" / "debug" / "inference_model.json"
    server = subprocess.Popen(
        [sys.executable, "-m", "trinity", "debug", "--config", str(config)]
        + ["--module", "inference_model"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not address_file.exists():
            assert server.poll() is None, server.stdout.read()
            assert time.monotonic() < deadline, "the inference model did not start"
            time.sleep(0.5)
        served = json.loads(address_file.read_text())
        assert served["pid"] == server.pid
        assert served["models"]["rollout_model"]["base_url"].startswith("http://127.0.0.1:")

        output = tmp_path / "out.jsonl"
        result = _debug(
            "--config", str(config), "--module", "workflow",
            "--output-file", str(output), "--plugin-dir", str(tmp_path / "plugins"),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "using rollout_model" in result.stdout
        assert "starting an engine" not in result.stdout
        experiences = JsonlReader(output).read_new(100)
        # two tasks, each one merged two-turn conversation
        assert len(experiences) == 2
        for exp in experiences:
            assert exp.info["turns"] == 2
            assert exp.eid.batch == "debug"
            mask = exp.action_mask
            assert bool(mask.any()) and not bool(mask.all())  # replies True, user turn False
            assert exp.reward in (0.0, 1.0)
    finally:
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=60)
    assert server.returncode == 0, out
    assert "serving rollout_model" in out and "inference model stopped" in out
    assert not address_file.exists()


def test_workflow_without_a_served_model_starts_its_own_engine(tiny_model_dir, tmp_path):
    config = _setup(tmp_path, tiny_model_dir, "math_workflow")
    # a stale address file (its server is gone) is reported and skipped
    stale = tmp_path / "ckpt" / "debug-test" / "dbg" / "debug" / "inference_model.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(
        json.dumps(
            {
                "pid": 1,
                "models": {"rollout_model": {"base_url": "http://127.0.0.1:9/v1", "model": "x"}},
            }
        )
    )
    output = tmp_path / "out.db"
    result = _debug("--config", str(config), "--module", "workflow", "--output-file", str(output))
    assert result.returncode == 0, result.stderr
    assert "is not usable" in result.stdout
    assert "starting an engine in this process" in result.stdout
    storage = SQLExperienceStorage(str(output))
    experiences = storage.read(100)
    storage.close()
    assert len(experiences) == 2 * 2  # num_tasks x repeat_times
    assert {e.eid.task for e in experiences} == {0, 1}
    assert all(e.reward is not None and e.response_length <= 8 for e in experiences)


def test_bad_module_and_missing_plugin_dir_are_reported(tmp_path):
    result = _debug("--config", str(tmp_path / "c.yaml"), "--module", "trainer")
    assert result.returncode == 2
    assert "invalid choice: 'trainer'" in result.stderr
    assert "inference_model" in result.stderr and "workflow" in result.stderr
    result = _debug(
        "--config", "c.yaml", "--module", "workflow", "--plugin-dir", str(tmp_path / "none")
    )
    assert result.returncode != 0 and "is not a directory" in result.stderr
    assert os.path.basename(str(tmp_path / "none")) in result.stderr
