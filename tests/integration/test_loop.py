"""One GRPO step through ``trinity.loop`` on the tiny model: the trainer's weights move,
the rollout engine gets them as policy version 1, and the buffer is read past the step.

The reward (``even_token``: 1 when the first response token's id is even) varies
within each group of rollouts of the random tiny model, so GRPO's advantages are not
all zero and the step has a gradient (with no gradient AdamW would leave every weight
as it was, and the checks on the weights would fail).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trinity import loop
from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import rollout_args, set_reward

# make_config, the trainer tests' resolved configs, lives beside those tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "trainer"))
from trainer_testing import make_config  # noqa: E402

pytestmark = pytest.mark.slow

TASKS, ROLLOUTS = 2, 8
WORKFLOW = "even_token_test_workflow"
EMBEDDING = "model.embed_tokens.weight"


@WORKFLOWS.register(WORKFLOW)
class EvenTokenWorkflow(Workflow):
    """Samples ``repeat_times`` replies; reward 1 when the first response token's id is even."""

    async def run_async(self) -> list[Experience]:
        experiences = await self.model.achat(
            [{"role": "user", "content": self.task.prompt}],
            n=self.task.repeat_times,
            **rollout_args(self.task),
        )
        for run, exp in enumerate(experiences):
            first = int(exp.tokens[exp.prompt_length])
            set_reward(exp, {"even_token": float(first % 2 == 0)})
            exp.eid.run = run
        return experiences


def test_one_grpo_step_trains_and_hands_the_weights_to_the_engine(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "tasks").mkdir()
    row = json.dumps({"prompt": "Say yes."}) + "\n"
    (tmp_path / "tasks" / "train.jsonl").write_text(row * TASKS)
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "grpo",
        algorithm={"repeat_times": ROLLOUTS},
        model={"max_prompt_tokens": 64, "max_response_tokens": 2, "min_response_tokens": 1},
        buffer={
            "batch_size": TASKS,
            "total_steps": 1,
            "explorer_input": {
                "default_workflow_type": WORKFLOW,
                "taskset": {"format": {"prompt_key": "prompt"}},
            },
            # a SQLite buffer keeps a read position (the in-memory queue keeps none)
            "trainer_input": {
                "experience_buffer": {"storage_type": "sql", "path": str(tmp_path / "exp.db")}
            },
        },
        explorer={"runner_per_model": TASKS},
    )
    initial = load_file(tiny_model_dir / "model.safetensors")[EMBEDDING]
    run = loop.build(cfg, total_steps=1, model_dir=tiny_model_dir)
    try:
        position = run.buffer.state_dict()
        result = loop.rl_step(run, 1)
        assert result is not None and result.train is not None
        rewards = [float(e.reward) for e in result.experiences]
        assert len(rewards) == TASKS * ROLLOUTS and 0 < sum(rewards) < len(rewards), rewards
        assert all(torch.isfinite(torch.tensor(v)) for v in result.train.values()), result.train
        # the trainer consumed the step: the buffer's read position moved past it
        assert run.buffer.state_dict() != position
        assert run.buffer.get(1, timeout=0) == []
        trained = run.trainer.weights_for_sync()[EMBEDDING].float()
        assert not torch.equal(trained, initial)
        # the engine holds version 1 and the trainer's weights
        assert result.version == run.explorer.model_version == 1
        engine = run.explorer.engines.engines[0]
        served = engine.model.get_input_embeddings().weight.detach().float()
        torch.testing.assert_close(served, trained)
        assert result.explore["rollout/staleness"] == 0.0
        assert result.train["trainer/staleness/max"] == 0.0
    finally:
        loop.close(run)
