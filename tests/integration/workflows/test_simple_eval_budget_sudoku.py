"""simple_workflow, math_eval_workflow, thinking_budget_workflow, sudoku_workflow and
rubric_judge_openai_workflow (each with its async name where Trinity-RFT has one)
through the runner pool on the tiny model.

The tiny model's replies are noise, so each test checks structure and that every reward
is the reward function applied to what the model actually said; the OpenAI judge is the
project's own server on 127.0.0.1, serving the tiny model, reached over HTTP.
"""

from __future__ import annotations

import pytest
from workflow_testing import make_pool, make_task, run_task

from trinity.rewards.math import math_boxed_reward, math_reward
from trinity.rewards.sudoku import step_reward
from trinity.rollout.wrapper import ModelWrapper
from trinity.workflows.math_eval import EVAL_INSTRUCTION, EVAL_SYSTEM_PROMPT
from trinity.workflows.rubric_judge import parse_rubric_rating
from trinity.workflows.sudoku import render_board

ROW = {"question": "What is 2 + 3?", "answer": "5"}
END = "</think>"


@pytest.mark.parametrize("name", ["simple_workflow", "async_simple_workflow"])
def test_simple_workflow_scores_with_the_tasksets_reward(pool, log_dir, name):
    fmt = {"prompt_key": "question", "response_key": "answer", "system_prompt": "Be brief."}
    task = make_task(name, ROW, repeat_times=2, reward_fn="math_reward", format=fmt)
    exps = run_task(pool, task, log_dir)
    assert sorted(e.eid.run for e in exps) == [0, 1]
    for exp in exps:
        assert exp.messages[:2] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": ROW["question"]},
        ]
        assert exp.reward == exp.metrics["reward/accuracy"]
        assert exp.reward == math_reward(exp.response_text, "5")["accuracy"]


def test_simple_workflow_needs_a_reward_function(pool, log_dir):
    result = pool.run_tasks([make_task("simple_workflow", ROW)], batch_id=0)
    assert result.failed == 1
    logs = "".join(p.read_text() for p in log_dir.glob("*.log"))
    assert "simple_workflow needs a reward function" in logs


@pytest.mark.parametrize("name", ["math_eval_workflow", "async_math_eval_workflow"])
def test_math_eval_workflow_asks_for_a_boxed_answer(pool, log_dir, name):
    task = make_task(name, ROW, repeat_times=2, is_eval=True, format={"response_key": "answer"})
    exps = run_task(pool, task, log_dir)
    assert len(exps) == 2
    for exp in exps:
        assert exp.messages[:2] == [
            {"role": "system", "content": EVAL_SYSTEM_PROMPT},
            {"role": "user", "content": f"{ROW['question']}\n{EVAL_INSTRUCTION}"},
        ]
        assert exp.temperature == pytest.approx(0.6)  # Qwen2.5-Math's evaluation sampling
        assert exp.reward == exp.metrics["reward/accuracy"]
        assert exp.reward == math_boxed_reward(exp.response_text, "5")["accuracy"]


@pytest.mark.parametrize(("budget", "reward_fn"), [(3, None), (0, "math_reward")])
def test_thinking_budget_forces_the_end_of_thinking(pool, engine, log_dir, budget, reward_fn):
    end_ids = engine.tokenizer.encode(END, add_special_tokens=False)
    row = {"messages": [{"role": "user", "content": "Think: 2 + 3?"}], "answer": "5"}
    task = make_task(
        "thinking_budget_workflow",
        row,
        repeat_times=2,
        reward_fn=reward_fn,
        format={"response_key": "answer"},
        workflow_args={"thinking_token_budget": budget},
        rollout_args={"temperature": 1.0, "max_tokens": 9},
    )
    exps = run_task(pool, task, log_dir)
    assert len(exps) == 2
    for exp in exps:
        response = exp.response_tokens.tolist()
        mask = exp.action_mask.tolist()
        assert len(response) <= 9 and exp.logprobs.shape == exp.action_mask.shape
        if exp.info["forced_reasoning_end"]:
            # `budget` sampled tokens, the end string the workflow wrote (not trained
            # on, logprob 0), then the sampled answer
            assert exp.info["thinking_tokens"] == budget
            assert response[budget : budget + len(end_ids)] == end_ids
            assert mask == [True] * budget + [False] * len(end_ids) + [True] * (
                len(response) - budget - len(end_ids)
            )
            assert (exp.logprobs[~exp.action_mask] == 0).all()
        else:  # the reply ended (eos) inside the budget
            assert all(mask) and len(response) <= budget
        assert exp.response_text == engine.tokenizer.decode(response, skip_special_tokens=True)
        if reward_fn is None:
            assert exp.reward is None  # as in Trinity-RFT: rewarded downstream
        else:
            assert exp.reward == math_reward(exp.response_text, "5")["accuracy"]
    assert any(e.info["forced_reasoning_end"] for e in exps)


def test_sudoku_workflow_rewards_each_step(pool, log_dir):
    puzzle = [[(r * 3 + r // 3 + c) % 9 + 1 for c in range(9)] for r in range(9)]
    puzzle[0][0] = puzzle[4][4] = 0
    task = make_task(
        "sudoku_workflow",
        {"puzzle": puzzle},
        repeat_times=2,
        format={},
        workflow_args={"max_steps": 2, "max_moves_per_step": 2},
    )
    exps = run_task(pool, task, log_dir)
    assert sorted({e.eid.run for e in exps}) == [0, 1]
    for run in (0, 1):
        steps = sorted((e for e in exps if e.eid.run == run), key=lambda e: e.eid.step)
        assert [e.eid.step for e in steps] == list(range(len(steps))) and len(steps) <= 2
        board = puzzle
        for exp in steps:  # replay the checker on what the model said
            assert render_board(board) in exp.messages[-2]["content"]
            reward, board = step_reward(board, exp.response_text, max_moves=2)
            assert exp.reward == exp.metrics["reward/sudoku"] == reward
        assert steps[-1].reward != 0 or len(steps) == 2  # -1 or 1 ends the game


def test_rubric_judge_openai_workflow_asks_the_server(model, engine, log_dir, monkeypatch):
    judge = ModelWrapper(engine, enable_history=True, name="judge")
    judge.serve_openai(api_key="judge-key")
    monkeypatch.setenv("JUDGE_URL", judge.openai_base_url)
    monkeypatch.setenv("JUDGE_KEY", "judge-key")
    row = {**ROW, "rubric": [{"description": "States the sum.", "weight": 2}]}
    args = {
        "judge_model_name": "judge",
        "judge_api_base_url_env": "JUDGE_URL",
        "judge_api_key_env": "JUDGE_KEY",
        "judge_max_tokens": 6,
    }
    task = make_task("rubric_judge_openai_workflow", row, repeat_times=2, workflow_args=args)
    pool = make_pool(model, log_dir)
    try:
        exps = run_task(pool, task, log_dir)
        calls = judge.extract_experience_from_history()
        monkeypatch.setenv("JUDGE_KEY", "wrong")
        refused = pool.run_tasks([task], batch_id=1)
    finally:
        pool.close()
        judge.close()
    # one HTTP call per answer, each reading the rubric and that answer
    assert len(calls) == 2 and len(exps) == 2
    prompts = [c.messages[-2]["content"] for c in calls]
    replies = [c.response_text for c in calls]
    rated = 0
    for exp in exps:
        assert any(exp.response_text in p and "States the sum." in p for p in prompts)
        assert exp.info["judge_reply"] in replies
        rating = parse_rubric_rating(exp.info["judge_reply"])
        assert exp.reward == exp.metrics["reward/rubric"] == (rating or 0.0)
        rated += rating is not None
    assert all(e.metrics["judge_success"] == rated / 2 for e in exps)
    assert refused.failed == 1  # the server refuses the wrong key
