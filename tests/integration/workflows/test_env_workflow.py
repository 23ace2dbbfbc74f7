"""env_workflow: multi-turn guess_number episodes through the runner pool.

The experience must be one sequence holding the whole conversation, trained only on
the policy's tokens, sampled from exactly that sequence (the engine's logprobs of the
finished sequence equal the sampling logprobs), and scored by replaying the
environment on the replies the model actually gave.
"""

from __future__ import annotations

import torch
from workflow_testing import check_conversation, make_task, run_task

from trinity.workflows.envs import GuessNumberEnv

ROW = {"target": 7, "low": 1, "high": 10}


def test_episode_covers_whole_conversation(pool, model, engine, log_dir):
    task = make_task(
        "env_workflow",
        ROW,
        repeat_times=2,
        format={},
        workflow_args={"env": "guess_number", "max_turns": 3},
        rollout_args={"temperature": 1.0, "max_tokens": 6},
    )
    exps = run_task(pool, task, log_dir)
    assert sorted(e.eid.run for e in exps) == [0, 1]
    for exp in exps:
        replies = [m for m in exp.messages if m["role"] == "assistant"]
        assert 1 <= len(replies) == exp.info["turns"] == exp.metrics["turns"] <= 3
        check_conversation(exp, engine.tokenizer, exp.messages)
        # the policy sampled every reply from this very sequence
        recomputed = model.logprobs(exp.tokens)[exp.prompt_length - 1 :]
        mask = exp.action_mask
        torch.testing.assert_close(recomputed[mask], exp.logprobs[mask], atol=2e-3, rtol=0)
        # replaying the environment on the model's replies gives the same reward
        env = GuessNumberEnv(ROW)
        observations = [env.reset()]
        for reply in replies:
            step = env.step(reply["content"])
            observations.append(step.observation)
        users = [m["content"] for m in exp.messages if m["role"] == "user"]
        assert users == observations[: len(users)]
        assert exp.info["env_done"] == env.solved
        rewards = env.rewards()
        assert {k: exp.metrics[f"reward/{k}"] for k in rewards} == rewards
        assert exp.reward == sum(rewards.values())


def test_episode_stops_when_context_is_full(log_dir, tiny_model_dir):
    from workflow_testing import make_pool

    from trinity.rollout.engine import TransformersEngine
    from trinity.rollout.wrapper import ModelWrapper

    with TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=90) as small:
        pool = make_pool(ModelWrapper(small), log_dir)
        task = make_task(
            "env_workflow",
            ROW,
            format={},
            workflow_args={"max_turns": 20},
            rollout_args={"temperature": 1.0, "max_tokens": 8},
        )
        try:
            [exp] = run_task(pool, task, log_dir)
        finally:
            pool.close()
    assert exp.tokens.numel() <= 90
    if not exp.info["env_done"]:
        assert exp.info["truncated"]
    check_conversation(exp, small.tokenizer, exp.messages)
