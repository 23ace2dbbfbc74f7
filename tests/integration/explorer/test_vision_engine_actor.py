"""A vision-language model's rollout engine in its own Ray actor (engines 1.. of
``engine_num``): the client renders the prompt with the model's processor here, the
images' tensors travel with the request, and the actor samples and scores exactly what
an engine in this process does."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray
import torch
from vlm_testing import squares_image

from trinity.explorer.engines import EngineActor, EngineClient
from trinity.rollout.vision_engine import rollout_engine
from trinity.rollout.wrapper import ModelWrapper

pytestmark = pytest.mark.slow  # an engine actor on the suite's shared Ray head


def test_an_engine_actor_takes_images(ray_client, tiny_idefics3_dir: Path) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": squares_image(3)},
                {"type": "text", "text": "How many squares?"},
            ],
        }
    ]
    args = {"model_path": str(tiny_idefics3_dir), "dtype": "float32", "seed": 0}
    handle = ray.remote(EngineActor).options(num_cpus=0).remote(args)
    client = EngineClient(handle, str(tiny_idefics3_dir))
    try:
        remote = ModelWrapper(client, max_response_tokens=4)
        [far] = remote.chat(messages, temperature=0.0)
        with rollout_engine(**args) as engine:
            near = ModelWrapper(engine, max_response_tokens=4)
            [here] = near.chat(messages, temperature=0.0)
        assert far.media is not None
        assert far.tokens.tolist() == here.tokens.tolist()
        torch.testing.assert_close(far.logprobs, here.logprobs, atol=1e-5, rtol=0)
        [scored] = remote.response_logprobs([far])
        torch.testing.assert_close(scored, far.logprobs, atol=2e-4, rtol=0)
    finally:
        client.close()
