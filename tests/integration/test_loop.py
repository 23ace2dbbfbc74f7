"""One GRPO step through ``trinity.loop`` on the tiny model: the trainer's weights move,
the rollout engine gets them as policy version 1, and the buffer is read past the step.
Then the run's loops (``ExploreLoop``, ``TrainLoop``), the classes the Ray actors run,
in this process: an explore stage, then a train stage on its buffer.

The reward (``even_token``: 1 when the first response token's id is even) varies
within each group of rollouts of the random tiny model, so GRPO's advantages are not
all zero and the step has a gradient (with no gradient AdamW would leave every weight
as it was, and the checks on the weights would fail).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from trinity import loop
from trinity.config import Config
from trinity.explorer.explore_loop import ExploreLoop, experience_pipeline
from trinity.explorer.explorer import Explorer
from trinity.explorer.explorer_state import explorer_state_at
from trinity.launch.buffer_actor import BufferActor
from trinity.monitor import make_monitor
from trinity.sync.weights import WeightReceiver
from trinity.trainer import checkpoint as ckpt
from trinity.trainer.buffer_position import buffer_position_at
from trinity.trainer.train_loop import TrainLoop
from trinity.trainer.trainer import Trainer
from trinity.types import Experience
from trinity.utils.memory import TrainerHeap
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


def grpo_config(model_dir: Path, tmp_path: Path, steps: int, rollouts: int, **top: Any) -> Config:
    """GRPO with the even-token workflow: ``steps`` batches of ``TASKS`` prompts,
    ``rollouts`` replies each, into a SQLite buffer (it keeps a read position, the
    in-memory queue keeps none)."""
    (tmp_path / "tasks").mkdir(exist_ok=True)
    row = json.dumps({"prompt": "Say yes."}) + "\n"
    (tmp_path / "tasks" / "train.jsonl").write_text(row * (steps * TASKS))
    return make_config(
        model_dir,
        tmp_path,
        "grpo",
        algorithm={"repeat_times": rollouts},
        model={"max_prompt_tokens": 64, "max_response_tokens": 2, "min_response_tokens": 1},
        buffer={
            "batch_size": TASKS,
            "total_steps": steps,
            "explorer_input": {
                "default_workflow_type": WORKFLOW,
                "taskset": {"format": {"prompt_key": "prompt"}},
            },
            "trainer_input": {
                "experience_buffer": {"storage_type": "sql", "path": str(tmp_path / "exp.db")}
            },
        },
        explorer={"runner_per_model": TASKS, "eval_on_startup": False},
        **top,
    )


def test_one_grpo_step_trains_and_hands_the_weights_to_the_engine(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = grpo_config(tiny_model_dir, tmp_path, steps=1, rollouts=ROLLOUTS)
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


class InProcessPeers:
    """The run loops' peers in this process: the buffer actor's plain class, reports in a list."""

    def __init__(self, buffer: BufferActor) -> None:
        self.buffer = buffer
        self.reports: list[tuple[str, int, dict[str, float]]] = []
        self.finished: list[str] = []

    def put(self, experiences: list[Experience]) -> None:
        self.buffer.put(experiences)

    def close_buffer(self) -> None:
        self.buffer.close()

    def report(self, role: str, step: int, metrics: dict[str, float]) -> None:
        self.reports.append((role, step, metrics))

    def finish(self, role: str) -> None:
        self.finished.append(role)


class PublishedSteps:
    """A publisher that keeps the steps the train loop asked it to consider."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def start(self) -> None:
        self.events.append("start")

    def after_step(self, step: int, total_steps: int) -> None:
        self.events.append(f"step {step}/{total_steps}")

    def stop(self) -> None:
        self.events.append("stop")

    def close(self) -> None:
        self.events.append("close")


def test_the_run_loops_explore_then_train_in_one_process(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Mode explore then mode train on its SQLite buffer, with the classes the Ray roles run."""
    job_dir = tmp_path / "job"
    logger = logging.getLogger("test_run_loops")
    cfg = grpo_config(tiny_model_dir, tmp_path, steps=2, rollouts=2, mode="explore")
    storage = cfg.buffer.trainer_input.experience_buffer

    explorer = Explorer(cfg, model_dir=tiny_model_dir, log_dir=job_dir / "log", logger=logger)
    receiver = WeightReceiver(cfg, job_dir, None, str(tiny_model_dir), logger)
    peers = InProcessPeers(BufferActor(storage))
    explore = ExploreLoop(
        cfg,
        job_dir,
        explorer,
        experience_pipeline(
            cfg.data_processor.experience_pipeline, cfg.service.data_juicer, job_dir
        ),
        receiver,
        make_monitor("", project="p", name="n", role="explorer", job_dir=job_dir),
        peers,
        logger,
    )
    try:
        assert explore.run(2)["steps"] == 2
    finally:
        explore.close()
    assert [(role, step) for role, step, _ in peers.reports] == [("explorer", 1), ("explorer", 2)]
    assert peers.finished == ["explorer"]
    assert explorer_state_at(job_dir, 2) is not None  # what a resumed explorer would load

    cfg = grpo_config(tiny_model_dir, tmp_path, steps=2, rollouts=2, mode="train")
    trainer = Trainer(cfg, model_dir=str(tiny_model_dir), total_steps=2, logger=logger)
    buffer = BufferActor(storage)
    peers, publisher = InProcessPeers(buffer), PublishedSteps()
    train = TrainLoop(
        cfg,
        job_dir,
        trainer,
        lambda n: buffer.read(n, 0),
        TrainerHeap(keep=False),  # keeping would change this process's allocator
        make_monitor("", project="p", name="n", role="trainer", job_dir=job_dir),
        peers,
        publisher,
        logger,
    )
    assert train.run(2)["steps"] == 2
    assert publisher.events == ["start", "step 1/2", "step 2/2", "stop", "close"]
    metrics = {step: m for role, step, m in peers.reports if role == "trainer"}
    assert sorted(metrics) == [1, 2] and peers.finished == ["trainer"]
    # explore step 2 rolled out with the initial weights: one step behind the schedule
    assert metrics[2]["trainer/staleness/max"] == 1.0
    # the final checkpoint, with the buffer position its batch left the SQLite buffer at
    assert ckpt.read_latest(job_dir) == 2
    assert buffer_position_at(job_dir, 2) == buffer.position()
