"""Weights through Ray's object store in their byte-array form (sync_method memory)."""

import numpy as np
import pytest
import ray
import torch

from trinity.sync.weights import from_object_store, to_object_store


@pytest.fixture(scope="module")
def local_ray(ray_client):
    """Ray for this module's tests: the suite's shared head (tests/conftest.py)."""
    return ray_client


def test_round_trip_is_exact_and_reads_the_store_in_place(local_ray):
    gen = torch.Generator().manual_seed(0)
    state = {
        "bf16": torch.randn(64, 48, generator=gen).to(torch.bfloat16),
        "fp32": torch.randn(3, 5, 7, generator=gen),
        "int64": torch.arange(10),
        "scalar": torch.tensor(2.5),
        "transposed": torch.randn(6, 4, generator=gen).t(),  # not contiguous
        "param": torch.nn.Parameter(torch.randn(8, generator=gen)),
    }
    fetched = ray.get(ray.put(to_object_store(state)))
    # numpy arrays come back as read-only views of the object store: no copy was made
    assert all(not data.flags.writeable for _, _, data in fetched.values())
    got = from_object_store(fetched)
    assert got.keys() == state.keys()
    for key, tensor in state.items():
        assert got[key].dtype == tensor.dtype, key
        assert got[key].shape == tensor.shape, key
        assert torch.equal(got[key], tensor.detach()), key


def test_tensors_keep_their_values_after_the_source_changes(local_ray):
    weight = torch.ones(4, dtype=torch.bfloat16)
    ref = ray.put(to_object_store({"w": weight}))
    weight.add_(1)  # the trainer's next step changes its parameters in place
    assert torch.equal(from_object_store(ray.get(ref))["w"], torch.ones(4, dtype=torch.bfloat16))
    assert isinstance(to_object_store({"w": weight})["w"][2], np.ndarray)
