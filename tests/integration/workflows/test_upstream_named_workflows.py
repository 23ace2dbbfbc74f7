"""The workflows registered under Trinity-RFT's names, through the runner pool on the
tiny model.

A random tiny model cannot judge: its replies are noise that never holds a score. So the
RULER and rubric judges are the tiny engine with its sampling scripted to one fixed reply
(``ScriptedEngine``: the real engine, tokenizer and chat template; only the sampled tokens
are given), and each test checks that the reply's scores become the rewards; one test
runs a real random judge and checks that its reply, whatever it is, is parsed into the
rewards. The reward model's score is checked against its log-probabilities computed
here, and the FrozenLake reward against gymnasium's own environment replayed on the
policy's replies, with the tiny model taught (``teach``) to move right on a two-tile lake.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from workflow_testing import check_conversation, make_pool, make_task, run_task, teach

from trinity.rewards.math import math_reward
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.sampling import Sample
from trinity.rollout.wrapper import ModelWrapper
from trinity.workflows.frozen_lake import SYSTEM_PROMPT, FrozenLakeEnv, parse_action
from trinity.workflows.reward_model import RM_PROMPT, yes_probability
from trinity.workflows.rubric_judge import parse_rubric_rating
from trinity.workflows.ruler import THINK_ANSWER_SYSTEM_PROMPT, parse_ruler_scores, scaled_gold
from trinity.workflows.tool_call import toolcall_reward

ROW = {"question": "What is 2 + 3?", "answer": "5"}
RUBRIC = [{"description": "States the sum.", "weight": 2}]
RULER_VERDICT = "Candidate 2 is better. [0.25, 1.0]"
RUBRIC_VERDICT = '```json\n{"rating": 7}\n```'
LAKE = ["SG", "FF"]  # one move right reaches the goal


class ScriptedEngine:
    """The real engine, except that every sample is ``reply``'s tokens (then eos)."""

    def __init__(self, engine: TransformersEngine, reply: str) -> None:
        self.engine = engine
        self.reply = reply
        self.prompts: list[str] = []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    async def agenerate(self, prompts, params):
        tok = self.engine.tokenizer
        self.prompts.extend(tok.decode(p) for p in prompts)
        ids = tok(self.reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        sample = Sample(ids, [-0.5] * len(ids), "stop", self.engine.model_version)
        return [[sample] * params.n for _ in prompts]


def scripted(engine: TransformersEngine, reply: str) -> ModelWrapper:
    return ModelWrapper(ScriptedEngine(engine, reply))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def lake_walker(tiny_model_dir, tmp_path_factory):
    """The tiny model taught to answer the lake's opening observation with ```Right```."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    lake = FrozenLakeEnv({}, max_steps=3, desc=LAKE)
    opening = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": lake.reset()},
    ]
    text = tokenizer.apply_chat_template(opening, tokenize=False, add_generation_prompt=True)
    dialogue = [(text, False), ("```Right```" + tokenizer.eos_token, True)]
    out = teach(tiny_model_dir, tmp_path_factory.mktemp("lake_walker"), [dialogue])
    with TransformersEngine(str(out), dtype="float32", max_model_len=1024) as engine:
        yield ModelWrapper(engine)


def _run(model, log_dir, task, auxiliary_models=None):
    pool = make_pool(model, log_dir, auxiliary_models=auxiliary_models)
    try:
        return run_task(pool, task, log_dir)
    finally:
        pool.close()


def test_async_math_workflow_is_math_workflow(pool, log_dir):
    exps = run_task(pool, make_task("async_math_workflow", ROW, repeat_times=2), log_dir)
    assert len(exps) == 2
    for exp in exps:
        assert exp.reward == math_reward(exp.response_text, "5")["accuracy"]
        assert exp.messages[0] == {"role": "user", "content": ROW["question"]}


def test_dotted_workflow_paths(pool, log_dir, tmp_path, monkeypatch):
    path = "trinity.workflows.math_workflow.MathWorkflow"
    exps = run_task(pool, make_task(path, ROW, repeat_times=2), log_dir)
    assert len(exps) == 2 and all(e.reward is not None for e in exps)
    # a user's module, imported by its dotted path without a plugin directory
    (tmp_path / "my_dotted_workflows.py").write_text(
        textwrap.dedent(
            """
            from trinity.workflows.base import Workflow
            from trinity.workflows.single_turn import set_reward

            class EchoLength(Workflow):
                async def run_async(self):
                    exps = await self.model.achat(
                        [{"role": "user", "content": self.task.prompt}], n=1, max_tokens=4
                    )
                    for exp in exps:
                        set_reward(exp, {"length": float(exp.response_length)})
                    return exps
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    [exp] = run_task(pool, make_task("my_dotted_workflows.EchoLength", ROW), log_dir)
    assert exp.reward == exp.metrics["reward/length"] == exp.response_length


def test_toolcall_workflow_on_a_toolace_row(pool, engine, log_dir):
    answer = [{"name": "add", "arguments": {"a": 2, "b": 3}}]
    row = {
        "tools": json.dumps([{"name": "add", "description": "a + b", "parameters": {}}]),
        "raw_system": "You call functions.",
        "conversations": [{"from": "human", "value": "Add 2 and 3."}],
        "answer": json.dumps(answer),
    }
    task = make_task("toolcall_workflow", row, repeat_times=2, format={})
    exps = run_task(pool, task, log_dir)
    assert len(exps) == 2
    for exp in exps:
        assert exp.messages[0]["content"].startswith("You call functions.")
        assert '"name": "add"' in exp.messages[0]["content"]
        assert exp.messages[1] == {"role": "user", "content": "Add 2 and 3."}
        assert exp.reward == toolcall_reward(exp.response_text, row["answer"])["accuracy"]


def test_math_rm_workflow_rewards_the_reward_models_probability(model, log_dir, tiny_model_dir):
    with TransformersEngine(
        str(tiny_model_dir), dtype="float32", max_model_len=512, seed=3
    ) as rm_engine:
        rm = ModelWrapper(rm_engine)
        task = make_task("math_rm_workflow", ROW, repeat_times=2)
        exps = _run(model, log_dir, task, auxiliary_models=[rm])
        assert len(exps) == 2
        tokenizer = rm.tokenizer
        for exp in exps:
            prompt = RM_PROMPT.format(
                question=ROW["question"], reference="5", response=exp.response_text
            )
            ids = rm_engine.apply_chat_template([{"role": "user", "content": prompt}])
            # log p(label | prompt), from the reward model's log-probs of the whole sequence
            yes, no = (
                float(rm.logprobs(ids + tokenizer(w, add_special_tokens=False)["input_ids"])[-1])
                for w in ("Yes", "No")
            )
            assert exp.reward == exp.metrics["reward/reward_model"]
            assert exp.reward == pytest.approx(yes_probability(yes, no), abs=1e-4)
            assert 0.0 < exp.reward < 1.0


def test_math_ruler_workflow_rewards_the_judges_scores(model, engine, log_dir):
    judge = scripted(engine, RULER_VERDICT)
    task = make_task("math_ruler_workflow", ROW, repeat_times=2)
    exps = _run(model, log_dir, task, auxiliary_models=[judge])
    # one judge call saw the question and both answers
    [prompt] = judge.engine.prompts
    assert ROW["question"] in prompt
    assert all(f"Candidate {i + 1}:\n{e.response_text}" in prompt for i, e in enumerate(exps))
    assert [e.reward for e in exps] == [0.25, 1.0]  # the judge's list, in answer order
    for exp in exps:
        assert exp.info["judge_reply"] == RULER_VERDICT
        assert exp.metrics["judge_success"] == 1.0
        assert exp.messages[0] == {"role": "system", "content": THINK_ANSWER_SYSTEM_PROMPT}
        # the gold reward (math_format_reward) is kept for monitoring
        assert exp.metrics["gold_reward"] == pytest.approx(
            exp.metrics["reward/accuracy"] + exp.metrics["reward/format"]
        )


def test_math_ruler_workflow_with_a_random_judge(model, log_dir, tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=1024) as judge:
        task = make_task(
            "math_ruler_workflow", ROW, repeat_times=2, workflow_args={"judge_max_tokens": 12}
        )
        exps = _run(model, log_dir, task, auxiliary_models=[ModelWrapper(judge)])
    scores = parse_ruler_scores(exps[0].info["judge_reply"], 2)
    for i, exp in enumerate(exps):
        assert exp.metrics["judge_success"] == float(scores is not None)
        assert exp.reward == (scores[i] if scores else 0.0)


def test_trainable_ruler_trains_the_judgements_against_gold(engine, log_dir):
    task = make_task(
        "math_trainable_ruler_workflow",
        ROW,
        repeat_times=2,
        workflow_args={"gold_probability": 1.0},
    )
    # the policy judges its own answers: its (scripted) replies hold the scores
    exps = _run(scripted(engine, RULER_VERDICT), log_dir, task)
    answers = [e for e in exps if e.eid.task == task.index]
    judgements = [e for e in exps if e.eid.task == f"{task.index}-ruler"]
    assert len(answers) == len(judgements) == 2  # two advantage groups
    gold = [scaled_gold(a.metrics["gold_reward"]) for a in answers]
    for answer in answers:
        assert answer.reward == answer.metrics["gold_reward"]
    for judgement in judgements:
        scores = parse_ruler_scores(judgement.response_text, 2)
        expected = 1 - sum(abs(s - g) for s, g in zip(scores, gold, strict=True)) / 2
        assert judgement.reward == pytest.approx(expected)
        assert judgement.metrics["judge_success"] == 1.0
        assert bool(judgement.action_mask.all())  # the judge's reply is trained on


def test_trainable_ruler_without_gold_rewards_by_the_policys_judgement(engine, log_dir):
    task = make_task(
        "math_trainable_ruler_workflow",
        ROW,
        repeat_times=2,
        workflow_args={"gold_probability": 0.0},
    )
    # the policy judges its own answers: its (scripted) replies hold the scores
    exps = _run(scripted(engine, RULER_VERDICT), log_dir, task)
    assert len(exps) == 2  # the judgement is not trained on
    assert [e.reward for e in exps] == [0.25, 1.0]
    assert all(e.eid.task == task.index for e in exps)


def test_rubric_judge_workflow(model, engine, log_dir):
    row = {**ROW, "rubric": RUBRIC}
    judge = scripted(engine, RUBRIC_VERDICT)
    exps = _run(model, log_dir, make_task("rubric_judge_workflow", row, repeat_times=2), [judge])
    # one judge call per answer, each with the rubric and that answer
    assert len(judge.engine.prompts) == 2
    for exp in exps:
        assert any(exp.response_text in p and "States the sum." in p for p in judge.engine.prompts)
    for exp in exps:
        assert exp.info["judge_reply"] == RUBRIC_VERDICT
        assert exp.reward == pytest.approx(parse_rubric_rating(RUBRIC_VERDICT)) == 6 / 9
        assert exp.metrics["judge_success"] == 1.0


def _replay(exp, desc):
    """Replay the policy's replies on gymnasium's environment; its reward and steps."""
    import gymnasium

    env = gymnasium.make("FrozenLake-v1", desc=desc, is_slippery=False)
    env.reset(seed=0)
    reward, steps = 0.0, 0
    for message in exp.messages:
        if message["role"] != "assistant":
            continue
        steps += 1
        move = parse_action(message["content"])
        if move is not None:
            _, reward, terminated, _, _ = env.step(move)
            if terminated:
                return float(reward), steps, True
    return 0.0, steps, False


def test_frozen_lake_taught_policy_reaches_the_goal(lake_walker, log_dir):
    pytest.importorskip("gymnasium")
    task = make_task(
        "frozen_lake_workflow",
        {"seed": 0},
        format={},
        workflow_args={"desc": LAKE, "max_steps": 3},
        rollout_args={"temperature": 0.0, "max_tokens": 8},
    )
    [exp] = _run(lake_walker, log_dir, task)
    assert exp.messages[-1] == {"role": "assistant", "content": "```Right```"}
    assert _replay(exp, LAKE) == (1.0, 1, True)  # gymnasium pays 1 on the goal
    assert exp.reward == exp.metrics["reward/success"] == 1.0
    assert exp.info["env_done"] and exp.info["env_steps"] == 1


def test_frozen_lake_random_policy_gets_the_environments_reward(pool, engine, log_dir):
    pytest.importorskip("gymnasium")
    task = make_task(
        "frozen_lake_workflow",
        {"seed": 7, "size": 3, "p": 0.8},
        repeat_times=2,
        format={},
        workflow_args={"max_steps": 3},
        rollout_args={"temperature": 1.0, "max_tokens": 6},
    )
    exps = run_task(pool, task, log_dir)
    desc = FrozenLakeEnv({"seed": 7, "size": 3, "p": 0.8}, max_steps=3).desc
    for exp in exps:
        reward, steps, done = _replay(exp, desc)
        assert exp.reward == reward and exp.info["env_steps"] == steps
        assert exp.info["env_done"] == done
        check_conversation(exp, engine.tokenizer, exp.messages)
