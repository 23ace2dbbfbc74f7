"""A trainer waiting for its batch says how many experiences it still lacks."""

from __future__ import annotations

import torch

from trinity.config.schema import StorageConfig
from trinity.launch.buffer_actor import BufferActor
from trinity.launch.roles import wait_message
from trinity.types import Experience


def test_the_wait_line_names_the_step_the_shortfall_and_the_timeout() -> None:
    line = wait_message(2, 5, 4, 61.4, 1800.0)
    assert line == (
        "train step 2: waited 61 s for 1 more of 5 experiences from the experience buffer "
        "(after buffer.trainer_input.experience_buffer.max_read_timeout 1800 s it trains "
        "on those there are)"
    )
    assert "waited 120 s for 5 experiences" in wait_message(1, 5, None, 120.0, 30.0)


def test_the_buffer_actor_tells_how_many_experiences_wait_in_its_queue() -> None:
    actor = BufferActor(StorageConfig(name="exp", storage_type="queue"))
    try:
        assert actor.size() == 0
        actor.put([Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1) for _ in range(3)])
        assert actor.size() == 3
        actor.get(2, 0.0)
        assert actor.size() == 1
    finally:
        actor.close()
