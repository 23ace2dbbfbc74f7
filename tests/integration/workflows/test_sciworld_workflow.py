"""``sciworld_workflow`` against the real ScienceWorld simulator (a Java process), on the
tiny model: once with a scripted reply whose command the simulator scores, once with the
random policy, whose replies hold no command.

``find-living-thing`` variation 0 starts in the hallway; opening the door to the
greenhouse is worth 8 of its 100 points (already open under the easy simplification,
the command still scores).
"""

from __future__ import annotations

import json
import shutil

import pytest
from test_upstream_named_workflows import scripted
from workflow_testing import check_conversation, make_pool, make_task, run_task

from trinity.rollout.engine import TransformersEngine
from trinity.rollout.wrapper import ModelWrapper

ENABLE = "bash scripts/ci_java.sh && .venv/bin/pip install 'trinity-rft[envs]'"
pytestmark = pytest.mark.skipif(
    shutil.which("java") is None, reason=f"ScienceWorld needs a Java runtime: {ENABLE}"
)
SPEC = json.dumps({"task_name": "find-living-thing", "var_num": 0})
OPEN_DOOR = "<think>The greenhouse has plants.</think><action>open door to greenhouse</action>"


@pytest.fixture(scope="module")
def long_engine(tiny_model_dir):
    pytest.importorskip("scienceworld", reason=f"ScienceWorld is not installed: {ENABLE}")
    # ScienceWorld's observations are long: room for the opening one and two turns
    with TransformersEngine(
        str(tiny_model_dir), dtype="float32", max_model_len=2048, seed=1
    ) as eng:
        yield eng


def _run(model, log_dir, task):
    pool = make_pool(model, log_dir)
    try:
        return run_task(pool, task, log_dir)
    finally:
        pool.close()


def _task(**kwargs):
    return make_task(
        "sciworld_workflow",
        {"game_file": SPEC},
        format={"prompt_key": "game_file"},
        workflow_args={"max_env_steps": 2},
        **kwargs,
    )


def test_the_simulators_score_is_the_reward(long_engine, log_dir):
    [exp] = _run(scripted(long_engine, OPEN_DOOR), log_dir, _task())
    roles = [m["role"] for m in exp.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert exp.messages[1]["content"].startswith("Task Description: ")
    assert "living thing" in exp.messages[1]["content"]
    # the simulator's answer: the easy simplification opens every door at the start
    assert exp.messages[3]["content"] == "Observation:\nThe door is already open."
    assert exp.info["env_score"] == 8 and exp.info["env_steps"] == 2
    assert exp.reward == exp.metrics["reward/score"] == 0.08
    assert exp.info["env_done"] is False


def test_random_policy_episodes(long_engine, log_dir):
    task = _task(repeat_times=2, rollout_args={"temperature": 1.0, "max_tokens": 8})
    exps = _run(ModelWrapper(long_engine), log_dir, task)
    assert [e.eid.run for e in exps] == [0, 1]
    for exp in exps:
        # eight random tokens hold no <action> tag: the simulator is never stepped
        assert exp.info["env_steps"] == 2 and exp.info["env_score"] == 0
        assert exp.reward == 0.0 and exp.info["env_done"] is False
        assert exp.messages[3]["content"].startswith("Observation:\nNo command")
        check_conversation(exp, long_engine.tokenizer, exp.messages)
