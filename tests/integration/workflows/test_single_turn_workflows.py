"""math, boxed-math and countdown workflows through the runner pool on the tiny model.

A random model answers nonsense, so the tests check structure and that each reward is
the reward function applied to what the model actually said.
"""

from __future__ import annotations

import pytest
import torch
from workflow_testing import make_task, run_task

from trinity.rewards.countdown import countdown_reward
from trinity.rewards.math import boxed_answer, math_boxed_reward, math_reward


def check_single_turn(exps, engine, n):
    assert len(exps) == n
    assert sorted(e.eid.run for e in exps) == list(range(n))
    for exp in exps:
        assert exp.response_length >= 1
        assert bool(exp.action_mask.all()) and exp.logprobs.shape == (exp.response_length,)
        assert exp.response_text == engine.tokenizer.decode(
            exp.response_tokens, skip_special_tokens=True
        )


def components(exp):
    return {k.removeprefix("reward/"): v for k, v in exp.metrics.items() if k.startswith("reward/")}


def test_math_workflow(pool, engine, log_dir):
    task = make_task("math_workflow", {"question": "What is 2 + 3?", "answer": "5"}, repeat_times=3)
    exps = run_task(pool, task, log_dir)
    check_single_turn(exps, engine, 3)
    for exp in exps:
        assert exp.messages[-2] == {"role": "user", "content": "What is 2 + 3?"}
        assert components(exp) == math_reward(exp.response_text, "5")
        assert exp.reward == sum(components(exp).values())


@pytest.mark.parametrize("format_score", [0.0, 0.2])
def test_math_boxed_workflow(pool, engine, log_dir, format_score):
    task = make_task(
        "math_boxed_workflow",
        {"question": "What is 2 + 3?", "answer": "5"},
        repeat_times=2,
        workflow_args={"format_score": format_score},
    )
    exps = run_task(pool, task, log_dir)
    check_single_turn(exps, engine, 2)
    for exp in exps:
        assert "\\boxed{" in exp.messages[-2]["content"]
        expected = math_boxed_reward(exp.response_text, "5")
        if format_score:
            expected["format"] = format_score if boxed_answer(exp.response_text) else 0.0
        assert components(exp) == expected
        assert exp.reward == pytest.approx(sum(expected.values()))


def test_countdown_workflow(pool, engine, log_dir):
    raw = {"nums": [3, 7, 25], "target": 46}
    task = make_task("countdown_workflow", raw, repeat_times=2, format={})
    exps = run_task(pool, task, log_dir)
    check_single_turn(exps, engine, 2)
    for exp in exps:
        prompt = exp.messages[-2]["content"]
        assert "3, 7, 25" in prompt and "46" in prompt
        assert components(exp) == countdown_reward(
            exp.response_text, {"numbers": [3, 7, 25], "target": 46}
        )


def test_countdown_workflow_reports_missing_columns(pool, log_dir):
    task = make_task("countdown_workflow", {"numbers": [1, 2], "goal": 3}, format={})
    result = pool.run_tasks([task], batch_id=0)
    assert result.failed == 1 and not result.experiences
    logs = "".join(p.read_text() for p in log_dir.glob("*.log"))
    assert "lacks column(s) ['nums', 'target']" in logs


def test_experience_tokens_are_prompt_plus_response(pool, engine, log_dir):
    task = make_task("math_workflow", {"question": "1 + 1?", "answer": "2"})
    [exp] = run_task(pool, task, log_dir)
    prompt = engine.apply_chat_template([{"role": "user", "content": "1 + 1?"}])
    assert exp.tokens[: exp.prompt_length].tolist() == prompt
    assert torch.equal(exp.tokens[exp.prompt_length :], exp.response_tokens)
