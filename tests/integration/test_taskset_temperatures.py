"""Two tasksets sampled at 1.0 and 0.3 train each row at its own temperature.

The explorer's runners roll out tasks of both tasksets (each with its own
``rollout_args.temperature``); the experiences pass through an SQLite experience
buffer; the trainer, whose first taskset samples at 1.0, recomputes the old log-probs
(rollout correction, ``bypass_mode: false``) and the reference model's. With the
weights the engine sampled with, every row's recomputed log-probs equal the engine's:
both sides of the importance ratio and of the KL term divide that row's logits by the
temperature it was sampled at.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from trinity.buffer import SQLExperienceStorage
from trinity.explorer.explorer import make_taskset_mix
from trinity.explorer.runner import RunnerPool
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.wrapper import ModelWrapper
from trinity.trainer.actor import forward_logprobs
from trinity.trainer.trainer import Trainer

# make_config, the trainer tests' resolved configs, lives beside those tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "trainer"))
from trainer_testing import make_config  # noqa: E402

TEMPERATURES = {"warm": 1.0, "cold": 0.3}


def two_taskset_config(model_dir: Path, tmp_path: Path):
    tasksets = []
    for name, temperature in TEMPERATURES.items():
        (tmp_path / name).mkdir()
        rows = [{"question": f"What is {i} + {len(name)}?", "answer": str(i + 4)} for i in (2, 5)]
        (tmp_path / name / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        tasksets.append(
            {
                "name": name,
                "path": str(tmp_path / name),
                "split": "train",
                "format": {"prompt_key": "question", "response_key": "answer"},
                "rollout_args": {"temperature": temperature},
            }
        )
    return make_config(
        model_dir,
        tmp_path,
        "grpo",
        algorithm={"repeat_times": 3, "kl_loss_fn": "low_var_kl", "use_reference": True},
        buffer={
            "batch_size": 4,
            "explorer_input": {
                "taskset": None,
                "tasksets": tasksets,
                "default_workflow_type": "math_workflow",
                "default_reward_fn_type": "math_reward",
            },
        },
        trainer={"trainer_config": {"algorithm": {"rollout_correction": {"bypass_mode": False}}}},
    )


@pytest.fixture
def rollouts(tiny_model_dir: Path, tmp_path: Path):
    """(config, experiences of one explore step over both tasksets, read back from SQLite)."""
    cfg = two_taskset_config(tiny_model_dir, tmp_path)
    tasks = make_taskset_mix(cfg).read_batch()
    assert sorted(t.taskset for t in tasks) == ["cold", "cold", "warm", "warm"]
    with TransformersEngine(str(tiny_model_dir), dtype="float32", seed=3) as engine:
        model = ModelWrapper(engine, max_response_tokens=8)
        pool = RunnerPool([model], num_runners=2, max_timeout=120, max_retry_times=0)
        try:
            result = pool.run_tasks(tasks, batch_id=0)
        finally:
            pool.close()
    assert not result.failed and len(result.experiences) == 12
    storage = SQLExperienceStorage(str(tmp_path / "buffer.db"))
    storage.write(result.experiences)
    read = storage.read(12)
    storage.close()
    return cfg, read


def test_each_rollout_keeps_its_tasksets_temperature(rollouts) -> None:
    _, experiences = rollouts
    for exp in experiences:
        assert exp.temperature == TEMPERATURES[exp.info["taskset"]]


def test_the_trainer_recomputes_each_row_at_its_own_temperature(
    rollouts, tiny_model_dir: Path
) -> None:
    cfg, experiences = rollouts
    # a row written before experiences kept it: its taskset's configured temperature
    old = next(e for e in experiences if e.info["taskset"] == "cold")
    old.temperature = None
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    assert trainer.temperature == 1.0  # the first taskset's
    batch, _ = trainer.prepare(experiences)
    assert batch.rollout_logprobs is not None and batch.ref_logprobs is not None
    mask = batch.action_mask.bool()
    cold = torch.tensor([e.info["taskset"] == "cold" for e in experiences])
    assert batch.temperatures.tolist() == pytest.approx([0.3 if c else 1.0 for c in cold])
    for row in range(batch.size):
        engine = batch.rollout_logprobs[row][mask[row]]
        assert engine.numel() > 0
        # old (pi_old) and reference (pi_ref) log-probs, both at the row's temperature
        torch.testing.assert_close(batch.old_logprobs[row][mask[row]], engine, atol=2e-4, rtol=0)
        torch.testing.assert_close(batch.ref_logprobs[row][mask[row]], engine, atol=2e-4, rtol=0)
    # the cold rows at the first taskset's 1.0 miss by far: what the check above rules out
    with torch.no_grad():
        at_one, _ = forward_logprobs(trainer.model, batch, temperature=1.0)
    miss = (at_one - batch.rollout_logprobs).abs()[cold[:, None] & mask]
    assert float(miss.mean()) > 0.5
