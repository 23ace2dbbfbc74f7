"""End to end: ``trinity run`` with ``llm_judge_workflow``, the tiny model as policy and
as judge (an auxiliary model served on the OpenAI API), for 2 steps."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_testing import run_demo


@pytest.mark.slow
def test_two_step_run_with_a_judge_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    judge = f"{{model_path: '{tiny_model_dir}', enable_openai_api: true, max_response_tokens: 6}}"
    result = run_demo(
        tiny_model_dir,
        tmp_path,
        "name=judge",
        "continue_from_checkpoint=true",
        "buffer.total_steps=2",
        "algorithm.repeat_times=2",
        "model.max_response_tokens=8",
        "explorer.runner_per_model=4",
        "explorer.eval_on_startup=false",
        "explorer.eval_interval=100",
        "buffer.explorer_input.default_workflow_type=llm_judge_workflow",
        "buffer.default_workflow_type=llm_judge_workflow",
        "buffer.explorer_input.taskset.workflow_args={judge_max_tokens: 6}",
        f"explorer.auxiliary_models=[{judge}]",
        f"buffer.trainer_input.experience_buffer.path=sqlite:///{tmp_path}/buffer.db",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    job = tmp_path / "trinity-demo" / "judge"
    log = (job / "log" / "explorer.log").read_text()
    assert re.search(
        r"explorer\.auxiliary_models\[0\] replica 0: OpenAI API at http://127\.0\.0\.1:\d+/v1", log
    ), log

    metrics = [
        json.loads(line)
        for line in (job / "monitor" / "judge_explorer_metrics.jsonl").read_text().splitlines()
    ]
    rollouts = [r for r in metrics if "rollout/judge_parse_failed/mean" in r]
    assert [r["step"] for r in rollouts] == [1, 2]
    assert all(r["rollout/failed_tasks"] == 0 for r in rollouts)

    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from trinity.common.schema.sql_schema import ExperienceModel

    sess = sessionmaker(bind=create_engine(f"sqlite:///{tmp_path}/buffer.db"))()
    exps = [ExperienceModel.to_experience(e) for e in sess.query(ExperienceModel).all()]
    assert len(exps) == 2 * 2 * 2  # steps x batch_size x repeat_times
    for exp in exps:
        # every answer was graded by the judge: its reply is kept, its score is the reward
        assert isinstance(exp.info["judge_reply"], str)
        assert 0.0 <= exp.reward <= 1.0
        assert exp.metrics["judge_parse_failed"] in (0.0, 1.0)
        assert exp.response_length <= 8
