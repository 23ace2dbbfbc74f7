"""End to end: ``trinity run`` with AgentScope's ReAct agent (the calculator as its tool) on
the tiny model for one step: the agent's calls come back as experiences and are trained on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_testing import run_demo

pytest.importorskip("agentscope")


@pytest.mark.slow
def test_one_step_of_a_react_agent(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = run_demo(
        tiny_model_dir,
        tmp_path,
        "name=react",
        "continue_from_checkpoint=true",
        "buffer.total_steps=1",
        "buffer.batch_size=1",
        "algorithm.repeat_times=2",
        "model.max_prompt_tokens=512",
        "model.max_response_tokens=8",
        "explorer.eval_on_startup=false",
        "explorer.eval_interval=100",
        "buffer.explorer_input.default_workflow_type=agentscope_react_math_workflow",
        "buffer.explorer_input.taskset.workflow_args={tools: [calculator], max_turns: 1}",
        f"buffer.trainer_input.experience_buffer.path=sqlite:///{tmp_path}/buffer.db",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    job = tmp_path / "trinity-demo" / "react"

    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from trinity.common.schema.sql_schema import ExperienceModel

    sess = sessionmaker(bind=create_engine(f"sqlite:///{tmp_path}/buffer.db"))()
    exps = [ExperienceModel.to_experience(e) for e in sess.query(ExperienceModel).all()]
    # max_turns 1: per rollout one reasoning call and AgentScope's closing summary call
    assert sorted((e.eid.run, e.eid.step) for e in exps) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for exp in exps:
        assert exp.response_length <= 8 and exp.reward == 0.0
        # the reasoning call offers the tools (the endpoint writes them into the system
        # prompt: SmolLM2's template has no place for them); the summary call offers none
        system = exp.messages[0]["content"]
        offered = '"name": "calculator"' in system and '"name": "generate_response"' in system
        assert offered == (exp.eid.step == 0)

    monitor = job / "monitor"
    trainer = [json.loads(line) for line in (monitor / "react_trainer_metrics.jsonl").open()]
    assert [r["step"] for r in trainer if "actor/pg_loss" in r] == [1]
