"""Every RL algorithm type raises a trivially learnable reward; with its direction
flipped it does not.

The trainer tests check that parameters change and metrics stay finite, which a flipped
sign anywhere between the advantage function and the loss would pass. Here each type
(every row of ``ALGORITHM_DEFAULTS`` with ``use_rollout``, so a new type is picked up;
on_policy_distill and jsd learn no reward, their direction test is the divergence to the
teacher in tests/integration/test_distill_direction.py) trains the tiny model
on-policy: the real explorer (rollout engine, runner pool, a workflow, the type's own
selection: raft's best of each group, dapo's dynamic sampling) samples from the current
weights, the real ``Trainer`` with the type's resolved config (``make_config``: ppo
with its critic, mix with 16 expert rows of 32 per step from a small SFT dataset) updates them,
and ``weights_for_sync`` goes into the engine through ``Explorer.load_weights`` after
every step. No Ray.

The task: one prompt, one response token sampled at temperature 0.3 (at 1.0 the random
tiny model spreads its mass over the whole vocabulary), reward 1 when it is the initial
policy's most likely token (probability 0.38 at 0.3), else 0; 2 tasks x 8 rollouts per
step, ``STEPS`` = 5 explore steps with a train step (AdamW, lr 1e-3) between each two.
The gain is the mean reward of the last two explore steps minus the initial policy's
expected reward (0.38). ``test_flipped_direction_misses_the_margin`` reverses the
direction where the type keeps it and checks that the same run then misses the margin:
it negates the advantages where the trainer receives them (its ``advantage_fn``; the
returns, the critic's targets, are kept), or for raft, which has no advantages (SFT on
the kept rollouts), makes the explorer keep each group's worst rollouts instead of its
best (``keep_worst_of_group``: raft's selection ranking the negated rewards).

Measured (the config's seed 42; rewards of the 5 explore steps, gain):

    type                right direction                   flipped
    asymre              0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    cispo               0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    dapo                0.50 0.38 0.97 0.99 1.00  +0.61   0.50 0.00 0.00 0.00 0.00  -0.38
    gigpo               0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    grpo                0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    grpo_verl           0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    gspo                0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    m2po                0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    mix                 0.50 0.44 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    mix_chord           0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    multi_step_grpo     0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    opmd                0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    ppo                 0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    raft                0.50 0.62 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    rec                 0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    reinforceplusplus   0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    rloo                0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    sapo                0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    sppo                0.50 0.38 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38
    topr                0.50 0.62 1.00 1.00 1.00  +0.62   0.50 0.00 0.00 0.00 0.00  -0.38

dapo's reward is the mean over everything its dynamic sampling rolled out in the step,
the extra rounds included. raft's first step trains on the 8 rollouts that hit the
target (its flipped run on the 8 that missed); with the explorer's selection left at
grpo's (none), raft fine-tunes on all its samples, which also sharpens the policy
towards the target, so the selection is what this test checks.

MARGIN = 0.3 is safe both ways: the right direction clears it by 0.31 (no run can gain
more than 1 - 0.38 = 0.62), and a flipped run cannot reach it once its reward has
fallen (its gain is then negative). With seeds 0-5 grpo, gspo, mix, opmd, ppo,
reinforceplusplus and rloo still ended at 0.94-1.00 (gain +0.56 to +0.62; flipped:
0.00, -0.38); the others were measured at seed 42 only. The first update sometimes lowers the reward (AdamW's first
step moves every parameter by about lr, whatever its gradient), hence the last two
steps. A policy that does not learn stays near 0.38 and fails as well.

    .venv/bin/pytest -q -n 0 tests/integration/test_learning_direction.py
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
from safetensors.torch import load_file

from trinity.algorithm.advantage.base import AdvantageInputs
from trinity.config import Config
from trinity.config.algorithm_defaults import ALGORITHM_DEFAULTS
from trinity.explorer.best_of_group import keep_best_of_group
from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import rollout_args, set_reward

# make_config, the trainer tests' resolved configs, lives beside those tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "trainer"))
from trainer_testing import make_config  # noqa: E402

if TYPE_CHECKING:
    from trinity.explorer.explorer import Explorer

pytestmark = pytest.mark.slow

RL_TYPES = sorted(
    n
    for n, r in ALGORITHM_DEFAULTS.items()
    if r.use_rollout and n not in ("on_policy_distill", "jsd")
)
PROMPT = "Say yes."
TEMPERATURE = 0.3
TASKS, ROLLOUTS = 2, 8  # per explore step: TASKS groups of ROLLOUTS
STEPS = 5  # explore steps; a train step and a weight load follow each but the last
MARGIN = 0.3
WORKFLOW = "target_token_test_workflow"


@WORKFLOWS.register(WORKFLOW)
class TargetTokenWorkflow(Workflow):
    """Samples ``repeat_times`` replies; reward = the share of their tokens that are the
    row's ``target`` token id (with one response token: 1 or 0)."""

    async def run_async(self) -> list[Experience]:
        experiences = await self.model.achat(
            [{"role": "user", "content": self.task.prompt}],
            n=self.task.repeat_times,
            **rollout_args(self.task),
        )
        target = int(self.task.raw["target"])
        for run, exp in enumerate(experiences):
            response = exp.tokens[exp.prompt_length :]
            set_reward(exp, {"target_token": float((response == target).float().mean())})
            exp.eid.run = run
        return experiences


def keep_worst_of_group(exps: list[Experience], min_reward: float = 0.0) -> int:
    """raft's selection ranking the negated rewards: each group keeps its worst rollouts
    (every group, whatever its rewards); the rewards are restored afterwards."""
    rewards = [exp.reward for exp in exps]
    for exp in exps:
        exp.reward = -float(exp.reward or 0.0)
    try:
        return keep_best_of_group(exps, min_reward=-math.inf)
    finally:
        for exp, reward in zip(exps, rewards, strict=True):
            exp.reward = reward


class FlippedAdvantage:
    """An advantage function with its advantages negated; the returns (the critic's
    regression targets) are left as they are."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __call__(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        advantages, returns = self.inner(inputs)
        return -advantages, returns


def type_config(model_dir: Path, root: Path, algorithm_type: str, total_steps: int) -> Config:
    """``algorithm_type``'s resolved config for the target-token task under ``root``."""
    return make_config(
        model_dir,
        root,
        algorithm_type,
        algorithm={"repeat_times": ROLLOUTS},
        model={
            "max_prompt_tokens": 64,
            "max_response_tokens": 1,
            "min_response_tokens": 0,
            "temperature": TEMPERATURE,
        },
        buffer={
            "batch_size": TASKS,
            "total_steps": total_steps,
            "explorer_input": {
                "default_workflow_type": WORKFLOW,
                "taskset": {"format": {"prompt_key": "prompt"}},
            },
        },
        explorer={"runner_per_model": TASKS},
        trainer={
            "trainer_config": {"actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 32}}}
        },
    )


def initial_policy(model_dir: Path, prompt: str) -> tuple[int, float]:
    """The initial policy's most likely first response token to ``prompt`` and its
    probability at ``TEMPERATURE``: the expected reward before training."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trinity.rollout.engine import render_chat

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = render_chat(tokenizer, [{"role": "user", "content": prompt}])
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1]
    token = int(logits.argmax())
    return token, float(torch.softmax(logits / TEMPERATURE, dim=-1)[token])


@dataclass
class Rollouts:
    explorer: Explorer
    initial_weights: dict[str, torch.Tensor]
    initial_reward: float  # expected reward of the initial policy


@pytest.fixture(scope="module")
def rollouts(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """One explorer for every run of the module (its engine and tokenizer load once);
    each run starts by loading the initial weights into it."""
    from trinity.explorer.explorer import Explorer

    root = tmp_path_factory.mktemp("learning_direction")
    target, initial_reward = initial_policy(tiny_model_dir, PROMPT)
    row = {"prompt": PROMPT, "target": target}
    (root / "tasks").mkdir()
    (root / "tasks" / "train.jsonl").write_text((json.dumps(row) + "\n") * TASKS)
    # the taskset repeats its row for as many steps as the module's runs take
    cfg = type_config(tiny_model_dir, root, "grpo", total_steps=10_000)
    explorer = Explorer(cfg, model_dir=tiny_model_dir, log_dir=None)
    try:
        weights = load_file(tiny_model_dir / "model.safetensors")
        yield Rollouts(explorer, weights, initial_reward)
    finally:
        explorer.close()


def learn(
    model_dir: Path,
    root: Path,
    algorithm_type: str,
    rollouts: Rollouts,
    flip: pytest.MonkeyPatch | None = None,
) -> list[float]:
    """The mean reward of each of ``STEPS`` explore steps, training on-policy between them.

    ``flip`` (a monkeypatch) reverses the direction: the trainer's advantage function is
    wrapped in :class:`FlippedAdvantage`, or for a type that trains on each group's best
    rollouts (raft) the explorer keeps the worst instead (:func:`keep_worst_of_group`).
    """
    from trinity import loop

    # mix and mix_chord: their expert rows, where make_config points the auxiliary buffer
    if ALGORITHM_DEFAULTS[algorithm_type].sample_strategy == "mix":
        rows = [
            {"prompt": f"What is {i} + 2?", "response": f"{i} + 2 = {i + 2}."} for i in range(4)
        ]
        (root / "sft").mkdir()
        (root / "sft" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = type_config(model_dir, root, algorithm_type, total_steps=STEPS)
    explorer = rollouts.explorer
    run = loop.build(cfg, total_steps=STEPS - 1, model_dir=model_dir, explorer=explorer)
    if flip is not None and ALGORITHM_DEFAULTS[algorithm_type].best_of_group:
        flip.setattr("trinity.explorer.explorer.keep_best_of_group", keep_worst_of_group)
    elif flip is not None:
        run.trainer.advantage_fn = FlippedAdvantage(run.trainer.advantage_fn)
    # the type's own explorer behaviour: raft's best-of-group selection, dapo's dynamic
    # sampling (the shared explorer was built with grpo's config)
    explorer.config.algorithm = cfg.algorithm
    explorer.load_weights(rollouts.initial_weights, 0)
    rewards = []
    try:
        # explore, put, train and load the new weights (trinity.loop.rl_step) ...
        for step in range(1, STEPS):
            result = loop.rl_step(run, step)
            assert result is not None and result.train is not None, step
            assert len(result.experiences) == TASKS * ROLLOUTS, result.explore
            assert result.version == step
            rewards.append(result.explore["rollout/reward/mean"])
        # ... then explore once more with the last weights
        experiences, metrics = explorer.explore_step(STEPS)
        assert len(experiences) == TASKS * ROLLOUTS, metrics
        rewards.append(metrics["rollout/reward/mean"])
    finally:
        loop.close(run, keep_explorer=True)
    return rewards


def gain(rewards: list[float], initial_reward: float) -> float:
    """Mean reward of the last two explore steps minus the initial policy's expected one."""
    return sum(rewards[-2:]) / 2 - initial_reward


@pytest.mark.parametrize("algorithm_type", RL_TYPES)
def test_training_raises_the_reward(
    tiny_model_dir: Path,
    tmp_path: Path,
    rollouts: Rollouts,
    algorithm_type: str,
) -> None:
    rewards = learn(tiny_model_dir, tmp_path, algorithm_type, rollouts)
    assert gain(rewards, rollouts.initial_reward) >= MARGIN, rewards


@pytest.mark.parametrize("algorithm_type", RL_TYPES)
def test_flipped_direction_misses_the_margin(
    tiny_model_dir: Path,
    tmp_path: Path,
    rollouts: Rollouts,
    algorithm_type: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rewards = learn(tiny_model_dir, tmp_path, algorithm_type, rollouts, flip=monkeypatch)
    assert gain(rewards, rollouts.initial_reward) < MARGIN, rewards
