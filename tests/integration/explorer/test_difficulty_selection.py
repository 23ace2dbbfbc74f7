"""difficulty_based selection through the real explorer: its draws move to the target band.

Nine tasks pass at 0, 0.5 or 1 (three each); their prior columns bracket that rate
(weak = rate - 0.4, strong = rate + 0.4, clipped). The workflow scores each run from the
row, without the model, so every step's rewards are exact. With target_reward 0.5 the
explorer's reader starts uniform (no feedback yet) and, fed each step's pass rates,
puts nearly all its probability on the three tasks that pass half the time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from behaviour_workflow import behaviour_config

from trinity.explorer.explorer import Explorer
from trinity.types import EID, Experience
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS

PASS_RATES = [0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0]
BAND = {3, 4, 5}  # the tasks that pass at the target rate


class PassRateWorkflow(Workflow):
    """Run r of a task scores 1 when r < pass_rate * repeat_times, else 0."""

    async def run_async(self) -> list[Experience]:
        n = self.task.repeat_times
        solved = round(self.task.raw["pass_rate"] * n)
        return [
            Experience(
                tokens=torch.tensor([1, 2, 3]),
                prompt_length=2,
                reward=float(r < solved),
                eid=EID(run=r),
            )
            for r in range(n)
        ]


@pytest.fixture
def pass_rate_workflow():
    WORKFLOWS.register("pass_rate_test_workflow")(PassRateWorkflow)
    yield
    WORKFLOWS._items.pop("pass_rate_test_workflow", None)


def write_rows(data: Path) -> None:
    data.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "question": f"task {i}",
            "answer": "",
            "pass_rate": rate,
            "weak": max(rate - 0.4, 0.0),
            "strong": min(rate + 0.4, 1.0),
        }
        for i, rate in enumerate(PASS_RATES)
    ]
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.usefixtures("pass_rate_workflow")
def test_the_explorers_draws_move_to_the_target_band(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_rows(data)
    config = behaviour_config(
        tiny_model_dir,
        tmp_path,
        data,
        "buffer.batch_size=3",
        "algorithm.repeat_times=4",
        "buffer.explorer_input.default_workflow_type=pass_rate_test_workflow",
        "buffer.explorer_input.taskset.data_selector.selector_type=difficulty_based",
        "buffer.explorer_input.taskset.data_selector.feature_keys=[weak, strong]",
        "buffer.explorer_input.taskset.data_selector.kwargs={target_reward: 0.5, tau: 0.05, m: 4}",
    )
    explorer = Explorer(config, model_dir=tiny_model_dir, log_dir=tmp_path / "log")
    try:
        selector = explorer.taskset.readers[0].difficulty
        assert sum(selector.probabilities()[i] for i in BAND) == pytest.approx(1 / 3)
        drawn = []
        for step in range(1, 5):
            experiences, _ = explorer.explore_step(step)
            drawn.append(sorted({e.eid.task for e in experiences}))
        state = explorer.state_dict()
    finally:
        explorer.close()
    band_mass = sum(selector.probabilities()[i] for i in BAND)
    assert band_mass > 0.9, (band_mass, drawn)
    in_band = [len(BAND.intersection(tasks)) for tasks in drawn]
    assert in_band[0] < 3 and in_band[-1] == 3, drawn  # a mixed first batch, a band-only last
    # the estimates are part of the state a resumed run starts from
    assert state["taskset"]["selectors"]["arithmetic"]["capability"] == selector.capability
