"""engine_num 2 on a real local Ray: engine 0 in this process, engine 1 in an actor.

Runners are spread over both engines, both serve requests, ``explorer.env_vars`` reach
the engine actor's process and not this one (an Explorer built in one's own program
leaves its environment alone; the launcher starts the explorer's actor with them), and a weight update lands in every engine, from tensors and from the node's
shared-memory slot (the remote engine then scores tokens exactly as the local one does).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import ray
import torch
from behaviour_workflow import behaviour_config, write_tasks

from trinity.explorer.engines import EngineClient
from trinity.explorer.explorer import Explorer
from trinity.launch.process_policy import actor_env
from trinity.sync.weight_slot import SlotReader, SlotState, SlotWriter

pytestmark = pytest.mark.slow  # starts a local Ray instance and an engine actor


@pytest.fixture(scope="module")
def local_ray(ray_client):
    """Ray for this module's tests: the suite's shared head (tests/conftest.py)."""
    return ray_client


def test_two_engines_share_the_work_and_the_weights(
    local_ray, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    write_tasks(data, "train", ["ok"] * 8)
    write_tasks(data, "test", ["ok"])
    config = behaviour_config(
        tiny_model_dir,
        tmp_path,
        data,
        "buffer.batch_size=8",
        "explorer.runner_per_model=2",
        "explorer.rollout_model.engine_num=2",
        "explorer.env_vars={TRINITY_TEST_ENV: from-config}",
    )
    explorer = Explorer(config, model_dir=tiny_model_dir, log_dir=tmp_path / "log")
    try:
        local, remote = explorer.engines.engines
        assert isinstance(remote, EngineClient)
        assert len(explorer.runners.slots) == 4
        assert [s.model.engine for s in explorer.runners.slots] == [local, remote, local, remote]

        experiences, metrics = explorer.explore_step(1)
        assert metrics["rollout/failed_tasks"] == 0 and len(experiences) == 16
        assert {e.info["env"] for e in experiences} == {None}
        assert "TRINITY_TEST_ENV" not in os.environ
        info = remote.info()
        assert info["pid"] != os.getpid()
        assert info["env"]["TRINITY_TEST_ENV"] == "from-config"

        # the explorer's actor is started as trinity run starts it (launch/run.py)
        class _Environment:  # defined here: the worker cannot import this test module
            def get(self, key: str) -> str | None:
                return os.environ.get(key)

        runner_process = (
            ray.remote(_Environment)
            .options(runtime_env=actor_env(config.explorer.env_vars))
            .remote()
        )
        assert ray.get(runner_process.get.remote("TRINITY_TEST_ENV")) == "from-config"
        assert local.num_batches > 0 and info["num_batches"] > 0

        # a new policy version reaches both engines
        state = {k: v.clone() for k, v in local.model.state_dict().items()}
        state["model.norm.weight"] = state["model.norm.weight"] * 3
        explorer.load_weights(state, 1)
        assert explorer.model_version == 1 and remote.model_version == 1
        assert remote.info()["model_version"] == 1
        tokens = experiences[0].tokens.tolist()
        plen = experiences[0].prompt_length
        [here] = local.compute_logprobs([tokens], [plen])
        [there] = remote.compute_logprobs([tokens], [plen])
        torch.testing.assert_close(torch.tensor(there), torch.tensor(here))
        assert not torch.allclose(torch.tensor(here), experiences[0].logprobs)
        experiences, _ = explorer.explore_step(2)
        assert {e.info["model_version"] for e in experiences} == {1}

        # a version read from the node's shared-memory slot: the engine actor reads the
        # file itself (it is handed the slot version, not the tensors)
        state["model.norm.weight"] = state["model.norm.weight"] * 2
        writer, reader = SlotWriter(str(tmp_path / "slot")), SlotReader()
        from_slot = reader.read(writer.write(state))
        assert isinstance(from_slot, SlotState)

        def no_object_store(state):
            raise AssertionError("the slot's version went through the object store")

        monkeypatch.setattr("trinity.sync.weights.to_object_store", no_object_store)
        explorer.load_weights(from_slot, 2)
        assert remote.info()["model_version"] == 2
        [here2] = local.compute_logprobs([tokens], [plen])
        [there2] = remote.compute_logprobs([tokens], [plen])
        torch.testing.assert_close(torch.tensor(there2), torch.tensor(here2))
        assert not torch.allclose(torch.tensor(here2), torch.tensor(here))
    finally:
        explorer.close()
