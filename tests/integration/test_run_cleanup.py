"""``trinity.launch.run.run()`` called from a program: a run that fails leaves no actor.

A program that calls ``run()`` stays connected to Ray after the run, so an actor the
run forgets outlives it (holding its model, its CPUs and its Ray name) until the program
exits. The run here joins the suite's shared head from this process and fails once its
actors are up: the explorer cannot read its taskset. The actors are then looked up in
the GCS's actor table (``ray._private.state``: the state API's ``list_actors`` needs the
dashboard, which the shared head does not run).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from cli_testing import DEMO

from trinity.config import load_config
from trinity.launch.errors import RunError
from trinity.launch.run import run


def _alive_actors(job_id: str) -> list[str]:
    import ray._private.state

    return [
        f"{a['ActorClassName']} {a['Name']!r} ({a['State']})"
        for a in ray._private.state.actors().values()
        if a["JobID"] == job_id and a["State"] != "DEAD"
    ]


@pytest.fixture
def disconnect_after():
    """Disconnect this process from Ray after the test (``run()`` connected it) and drop
    the address ray.init exported, as the ``ray_client`` fixture does."""
    before = os.environ.get("RAY_ADDRESS")
    yield
    import ray

    ray.shutdown()
    os.environ.pop("RAY_ADDRESS", None)
    if before is not None:
        os.environ["RAY_ADDRESS"] = before


def test_a_failed_run_stops_every_actor_it_started(
    tiny_model_dir: Path, tmp_path: Path, disconnect_after
) -> None:
    import ray

    # rows without the prompt column math_workflow reads: the explorer's start fails
    # after the synchronizer, the buffer, the explorer and the trainer were started
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"question": "1 + 1 = ?", "answer": "2"}\n' * 4)
    config = load_config(
        DEMO,
        [
            f"model.model_path={tiny_model_dir}",
            f"checkpoint_root_dir={tmp_path}",
            "name=fails-after-start",
            "buffer.total_steps=1",
            f"buffer.explorer_input.taskset.path={data}",
            "buffer.explorer_input.taskset.format.prompt_key=prompt",
            "buffer.explorer_input.eval_tasksets=[]",
        ],
    )
    with pytest.raises(RunError, match="missing key 'prompt'"):
        run(config)
    job_id = ray.get_runtime_context().get_job_id()
    # a killed actor shows as DEAD in the table a moment after ray.kill
    deadline = time.monotonic() + 15
    while (alive := _alive_actors(job_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive == [], f"actors of the failed run still alive: {alive}"
