"""On-policy distillation lowers the student's KL to a fixed teacher; with the sign of its
advantages flipped it raises it.

These types learn no reward (tests/integration/test_learning_direction.py leaves them
out), so their direction test is the KL itself. The real explorer (rollout engine, the
teacher as ``explorer.auxiliary_models[0]``, ``on_policy_distill_workflow``) samples
from the current student, the real ``Trainer`` (``on_policy_distill``'s resolved config,
``make_config``) updates it, and its weights go back into the engine after every step.
No Ray.

Student: the tiny model. Teacher: the tiny model with N(0, 0.05^2) noise added to every
parameter (seed 1), a fixed model near enough for a few steps to close part of the gap.
Task: one prompt, 4 tasks x 8 rollouts of 4 tokens at temperature 1 per step, AdamW lr
3e-3, ``STEPS`` = 6 explore steps with a train step between each two. The measure is
exact, not sampled: at every response position of a step's rollouts, the full-vocabulary
KL(student || teacher) of the next-token distributions, averaged over positions.

Measured (seed 42; KL of the 6 explore steps, in nats):

    right sign  1.853 1.641 1.605 1.700 1.599 1.617   last two 1.608: -0.245
    flipped     1.853 2.093 2.238 2.248 2.294 2.362   last two 2.328: +0.475

``MARGIN`` = 0.15: the mean of the last two steps must lie that far below the first. The
right sign clears it by 0.095, the flipped run misses it by 0.63. (``jsd`` is not held to
it: its per-token advantage, minus the JSD of the sampled token's two probabilities, is
close to 0 when both are small, as they are here over a 49k vocabulary; on this setup
its KL rose from 1.85 to 2.04.)

    .venv/bin/pytest -q -n 0 tests/integration/test_distill_direction.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from trinity.algorithm.advantage.base import AdvantageInputs

# make_config, the trainer tests' resolved configs, lives beside those tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "trainer"))
from trainer_testing import make_config  # noqa: E402

pytestmark = pytest.mark.slow

PROMPT = "Say yes."
TEMPERATURE = 1.0
TASKS, ROLLOUTS, TOKENS = 4, 8, 4
STEPS = 6
NOISE = 0.05
MARGIN = 0.15


@pytest.fixture(scope="module")
def teacher_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with seeded Gaussian noise on every parameter."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * NOISE)
    out = tmp_path_factory.mktemp("teacher")
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


class Flipped:
    def __init__(self, inner) -> None:
        self.inner = inner

    def __call__(self, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        advantages, returns = self.inner(inputs)
        return -advantages, returns


def exact_kl(student, teacher, experiences) -> float:
    """Mean over response positions of KL(student || teacher) of the next-token
    distributions at ``TEMPERATURE``, the full vocabulary summed."""
    total, count = 0.0, 0
    with torch.no_grad():
        for exp in experiences:
            ids, p = exp.tokens[None], exp.prompt_length
            ls = torch.log_softmax(student(ids).logits[0, p - 1 : -1] / TEMPERATURE, -1)
            lt = torch.log_softmax(teacher(ids).logits[0, p - 1 : -1] / TEMPERATURE, -1)
            kl = (ls.exp() * (ls - lt)).sum(-1)
            total += float(kl.sum())
            count += kl.numel()
    return total / count


def distill(model_dir: Path, teacher_dir: Path, root: Path, flip: bool = False) -> list[float]:
    """The student's exact KL to the teacher on each explore step's rollouts."""
    from transformers import AutoModelForCausalLM

    from trinity.buffer import make_experience_buffer
    from trinity.explorer.explorer import Explorer
    from trinity.trainer.train_input import TrainInput
    from trinity.trainer.trainer import Trainer

    (root / "tasks").mkdir()
    (root / "tasks" / "train.jsonl").write_text(json.dumps({"prompt": PROMPT}) + "\n")
    cfg = make_config(
        model_dir,
        root,
        "on_policy_distill",
        algorithm={"repeat_times": ROLLOUTS, "optimizer": {"lr": 3e-3}},
        model={
            "max_prompt_tokens": 64,
            "max_response_tokens": TOKENS,
            "min_response_tokens": 0,
            "temperature": TEMPERATURE,
        },
        buffer={
            "batch_size": TASKS,
            "total_steps": STEPS,
            "explorer_input": {
                "default_workflow_type": "on_policy_distill_workflow",
                "taskset": {"format": {"prompt_key": "prompt"}},
            },
        },
        explorer={
            "runner_per_model": TASKS,
            "auxiliary_models": [{"model_path": str(teacher_dir)}],
        },
        trainer={
            "trainer_config": {"actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 32}}}
        },
    )
    teacher = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32).eval()
    student = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    explorer = Explorer(cfg, model_dir=model_dir, log_dir=None)
    trainer = Trainer(cfg, model_dir=model_dir, total_steps=STEPS - 1)
    if flip:
        trainer.advantage_fn = Flipped(trainer.advantage_fn)
    buffer = make_experience_buffer(cfg.buffer.trainer_input.experience_buffer)
    train_input = TrainInput(cfg, trainer.tokenizer, lambda n: buffer.get(n, timeout=0))
    kls = []
    try:
        for step in range(1, STEPS + 1):
            experiences, metrics = explorer.explore_step(step)
            assert len(experiences) == TASKS * ROLLOUTS, metrics
            assert all(e.teacher_logprobs is not None for e in experiences)
            kls.append(exact_kl(student, teacher, experiences))
            if step == STEPS:
                break
            buffer.put(experiences)
            trainer.train_step(train_input.next_batch(trainer.global_step))
            weights = trainer.weights_for_sync()
            explorer.load_weights(weights, step)
            missing, _ = student.load_state_dict(
                {k: v.float() for k, v in weights.items()}, strict=False
            )
            assert all("lm_head" in k for k in missing), missing  # tied to the embedding
    finally:
        explorer.close()
        buffer.close()
    return kls


def drop(kls: list[float]) -> float:
    """First step's KL minus the mean of the last two steps'."""
    return kls[0] - sum(kls[-2:]) / 2


def test_distillation_lowers_the_kl_to_the_teacher(
    tiny_model_dir: Path, teacher_dir: Path, tmp_path: Path
) -> None:
    kls = distill(tiny_model_dir, teacher_dir, tmp_path)
    assert drop(kls) >= MARGIN, kls


def test_flipped_advantages_miss_the_margin(
    tiny_model_dir: Path, teacher_dir: Path, tmp_path: Path
) -> None:
    kls = distill(tiny_model_dir, teacher_dir, tmp_path, flip=True)
    assert drop(kls) < MARGIN, kls
