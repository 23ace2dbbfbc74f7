"""on_policy_distill_workflow: the policy samples, the teacher (an auxiliary model) scores
exactly the sampled tokens.

The teacher is the tiny model taught to answer "Yes." (so its log-probs differ from the
student's); its log-probs of each rollout's response tokens must equal a forward pass of
the teacher's weights in transformers on prompt + response, at the rollout temperature.
"""

from __future__ import annotations

import pytest
import torch
from workflow_testing import make_pool, make_task, run_task, teach

from trinity.rollout.engine import TransformersEngine
from trinity.rollout.wrapper import ModelWrapper
from trinity.workflows.math_boxed import INSTRUCTION

ROW = {"question": "Say yes.", "answer": "yes"}
TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def teacher_dir(tiny_model_dir, tmp_path_factory):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": ROW["question"]}], tokenize=False, add_generation_prompt=True
    )
    return teach(
        tiny_model_dir,
        tmp_path_factory.mktemp("teacher"),
        [[(prompt, False), ("Yes." + tokenizer.eos_token, True)]],
    )


@pytest.fixture(scope="module")
def teacher(teacher_dir):
    with TransformersEngine(str(teacher_dir), dtype="float32", max_model_len=512) as engine:
        yield ModelWrapper(engine)


@pytest.fixture(scope="module")
def distill_pool(model, teacher, log_dir):
    runners = make_pool(model, log_dir, auxiliary_models=[teacher])
    yield runners
    runners.close()


def reference_logprobs(model_dir, tokens: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """log_softmax(logits / T) of the response tokens, by transformers' own forward."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(tokens[None]).logits[0, prompt_length - 1 : -1] / TEMPERATURE
    return torch.log_softmax(logits, -1).gather(-1, tokens[prompt_length:, None])[:, 0]


def distill_task(workflow: str = "on_policy_distill_workflow", **kwargs):
    kwargs.setdefault("rollout_args", {"temperature": TEMPERATURE, "max_tokens": 6})
    return make_task(workflow, ROW, repeat_times=3, **kwargs)


def test_teacher_scores_the_students_own_tokens(distill_pool, teacher_dir, log_dir) -> None:
    exps = run_task(distill_pool, distill_task(), log_dir)
    assert len(exps) == 3
    for run, exp in enumerate(exps):
        expected = reference_logprobs(teacher_dir, exp.tokens, exp.prompt_length)
        assert exp.teacher_logprobs.shape == exp.logprobs.shape == (exp.response_length,)
        torch.testing.assert_close(exp.teacher_logprobs, expected, atol=1e-4, rtol=1e-4)
        # the student is another model: its own log-probs differ
        assert not torch.allclose(exp.teacher_logprobs, exp.logprobs, atol=1e-2)
        kl = (exp.logprobs - exp.teacher_logprobs).mean()
        assert exp.metrics["teacher_kl"] == pytest.approx(float(kl), abs=1e-6)
        assert exp.reward == 0.0  # no reward function named: nothing to monitor
        assert exp.eid.run == run


def test_workflow_args_temperature_sets_the_teachers(distill_pool, teacher, log_dir) -> None:
    task = distill_task(workflow_args={"temperature": 1.0})
    for exp in run_task(distill_pool, task, log_dir):
        at_one = teacher.response_logprobs([exp], temperature=1.0)[0]
        torch.testing.assert_close(exp.teacher_logprobs, at_one)


def test_a_named_reward_function_is_logged(distill_pool, log_dir) -> None:
    exps = run_task(distill_pool, distill_task(reward_fn="math_reward"), log_dir)
    for exp in exps:
        assert "reward/accuracy" in exp.metrics
        assert exp.reward == sum(v for k, v in exp.metrics.items() if k.startswith("reward/"))


def test_math_variant_asks_for_a_boxed_answer(distill_pool, log_dir) -> None:
    exps = run_task(distill_pool, distill_task("on_policy_distill_math_workflow"), log_dir)
    for exp in exps:
        assert exp.prompt_text.count(INSTRUCTION) == 1
        assert "reward/accuracy" in exp.metrics  # math_boxed_reward's component
        assert exp.teacher_logprobs is not None


def test_without_a_teacher_the_task_fails_naming_the_key(model, log_dir) -> None:
    pool = make_pool(model, log_dir)
    try:
        result = pool.run_tasks([distill_task()], batch_id=0)
    finally:
        pool.close()
    assert result.failed == 1 and not result.experiences
    logs = "".join(p.read_text() for p in log_dir.glob("*.log"))
    assert "needs a teacher model: add it to explorer.auxiliary_models" in logs
