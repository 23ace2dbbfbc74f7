"""AgentScope workflows on the tiny model through the runner pool: the agent's calls reach
the rollout model's endpoint and come back as the rollout's experiences, with its reward."""

from __future__ import annotations

import pytest
from workflow_testing import make_pool, make_task, run_task

pytest.importorskip("agentscope")

ROW = {"question": "What is 6 * 7?", "answer": "#### 42"}


async def legacy_agent(task, model):
    """Trinity-RFT's first adapter signature: two model calls, the reward back."""
    for _ in range(2):
        await model([{"role": "user", "content": task["question"]}])
    return 0.25


async def tuner_agent(task, model, logger):
    from agentscope.tuner import WorkflowOutput

    response = await model([{"role": "user", "content": task["question"]}])
    logger.info("agent replied")
    return WorkflowOutput(response=response, metrics={"calls": 1.0})


async def judge(task, response):
    from agentscope.tuner import JudgeOutput

    return JudgeOutput(reward=0.75, metrics={"judged": 1.0 if response is not None else 0.0})


@pytest.fixture(scope="module")
def agent_pool(model, log_dir):
    pool = make_pool(model, log_dir)
    yield pool
    pool.close()


def test_adapter_records_every_call_of_the_users_agent(agent_pool, log_dir) -> None:
    task = make_task(
        "agentscope_workflow_adapter",
        ROW,
        repeat_times=2,
        workflow_args={"workflow_func": "test_agentscope_workflows.legacy_agent"},
        rollout_args={"temperature": 1.0, "top_k": 50, "max_tokens": 8},
    )
    exps = run_task(agent_pool, task, log_dir)
    assert [(e.eid.run, e.eid.step) for e in exps] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for exp in exps:
        assert exp.reward == 0.25
        assert exp.messages[-2] == {"role": "user", "content": ROW["question"]}
        assert exp.response_length <= 8  # the taskset's max_tokens reached the endpoint
        assert exp.action_mask.all() and (exp.logprobs < 0).all()
    assert exps[1].metrics["agent_calls"] == 2.0


def test_adapter_v1_rewards_with_the_judge(agent_pool, log_dir) -> None:
    task = make_task(
        "agentscope_workflow_adapter_v1",
        ROW,
        workflow_args={"workflow_func": tuner_agent, "judge_func": judge},
    )
    [exp] = run_task(agent_pool, task, log_dir)
    assert exp.reward == 0.75
    assert exp.metrics == {"agent_calls": 1.0, "calls": 1.0, "judged": 1.0}


def test_react_math_agent_with_the_calculator(agent_pool, log_dir) -> None:
    # max_turns 1: one reasoning call; without a finishing call the agent then asks the
    # model once more for a summary
    task = make_task(
        "agentscope_react_math_workflow",
        ROW,
        repeat_times=2,
        workflow_args={"tools": ["calculator"], "max_turns": 1},
    )
    exps = run_task(agent_pool, task, log_dir)
    assert [(e.eid.run, e.eid.step) for e in exps] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    system = exps[0].messages[0]["content"]
    assert '"name": "calculator"' in system and '"name": "generate_response"' in system
    for exp in exps:
        assert exp.reward == 0.0 and exp.metrics["reward/accuracy"] == 0.0
