"""llm_judge_workflow: the policy answers, an auxiliary ModelWrapper grades.

With a random judge the score is usually unreadable (reward 0, parse failure counted);
a judge taught to reply "... Score: 7" must give every answer the reward 0.7. Either
way the reward is the parse of what the judge actually replied.
"""

from __future__ import annotations

import random

import pytest
from workflow_testing import make_pool, make_task, run_task, teach

from trinity.rollout.engine import TransformersEngine
from trinity.rollout.wrapper import ModelWrapper
from trinity.workflows.llm_judge import JUDGE_PROMPT, parse_judge_score

ROW = {"question": "Name a prime number.", "answer": "7"}
VERDICT = "Acceptable. Score: 7"


def judge_task(**kwargs):
    kwargs.setdefault("rollout_args", {"temperature": 1.0, "max_tokens": 6})
    return make_task("llm_judge_workflow", ROW, repeat_times=3, **kwargs)


def check_rewards(exps, n):
    assert len(exps) == n
    for exp in exps:
        reply = exp.info["judge_reply"]
        score = parse_judge_score(reply, 10)
        assert exp.metrics["judge_parse_failed"] == float(score is None)
        assert exp.reward == exp.metrics["reward/judge"] == (score or 0.0)
        assert bool(exp.action_mask.all())  # the policy's reply is trained on, not the judge's


@pytest.fixture(scope="module")
def taught_judge(tiny_model_dir, tmp_path_factory):
    """A judge taught to grade any answer with VERDICT (trained on random answers)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    rng = random.Random(0)
    dialogues = []
    for _ in range(6):
        answer = tokenizer.decode(
            [rng.randrange(1000, 40000) for _ in range(6)], skip_special_tokens=True
        )
        prompt = JUDGE_PROMPT.format(
            question=ROW["question"], reference="7", response=answer, max_score="10"
        )
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        dialogues.append([(text, False), (VERDICT + tokenizer.eos_token, True)])
    out = teach(tiny_model_dir, tmp_path_factory.mktemp("judge_model"), dialogues)
    with TransformersEngine(str(out), dtype="float32", max_model_len=512) as engine:
        yield ModelWrapper(engine)


def test_taught_judge_scores_every_answer(model, taught_judge, log_dir):
    pool = make_pool(model, log_dir, auxiliary_models=[taught_judge])
    try:
        exps = run_task(pool, judge_task(), log_dir)
    finally:
        pool.close()
    check_rewards(exps, 3)
    for exp in exps:
        assert exp.info["judge_reply"] == VERDICT
        assert exp.reward == pytest.approx(0.7)


def test_random_judge(model, tiny_model_dir, log_dir):
    with TransformersEngine(
        str(tiny_model_dir), dtype="float32", max_model_len=512, seed=5
    ) as judge_engine:
        pool = make_pool(model, log_dir, auxiliary_models=[ModelWrapper(judge_engine)])
        try:
            exps = run_task(pool, judge_task(workflow_args={"judge_max_tokens": 12}), log_dir)
        finally:
            pool.close()
    check_rewards(exps, 3)


def test_judge_workflow_needs_an_auxiliary_model(pool, log_dir):
    result = pool.run_tasks([judge_task()], batch_id=0)
    assert result.failed == 1
    logs = "".join(p.read_text() for p in log_dir.glob("*.log"))
    assert "add one to explorer.auxiliary_models" in logs
