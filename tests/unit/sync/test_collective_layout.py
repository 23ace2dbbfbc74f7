"""The layout of a weight broadcast travels as JSON: it round-trips exactly, and a
pickled layout (an older sender, or anyone who reached the store's port) is refused
before anything in it runs."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path

import pytest
import torch

from trinity.sync.collective import (
    WeightBroadcastError,
    WeightGroup,
    decode_layout,
    encode_layout,
    host_store,
    pack,
    unpack,
)


def state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "b.weight": torch.randn(7, 5, generator=g).to(torch.bfloat16),
        "a.bias": torch.randn(3, generator=g),
        "c.steps": torch.tensor(4, dtype=torch.int64),  # 0-dim
        "d.big": torch.randn(40, 33, generator=g, dtype=torch.float64),
    }


def test_the_layout_round_trips_through_json() -> None:
    packed = pack(state(), 3, bucket_bytes=600)  # several buckets
    raw = encode_layout(packed)
    raw.decode("utf-8")  # plain text on the wire
    layout, sizes = decode_layout(raw)
    assert layout == packed.layout
    assert sizes == [b.numel() for b in packed.buckets] and len(sizes) > 1
    got = unpack(type(packed)(3, layout, packed.buckets))
    for name, tensor in state().items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name


class Touch:
    """Unpickling this creates ``path``: what a pickled layout could do to a receiver."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_a_pickled_layout_is_refused(tmp_path: Path) -> None:
    packed = pack(state(), 1)
    pickled = pickle.dumps((packed.layout, [b.numel() for b in packed.buckets]))
    with pytest.raises(WeightBroadcastError, match="not the JSON layout"):
        decode_layout(pickled)
    with pytest.raises(WeightBroadcastError, match="no torch dtype"):
        decode_layout(b'{"tensors": [["w", "Tensor", [1], 0, 0]], "buckets": [4]}')


def test_a_receiver_refuses_a_pickled_layout_on_the_wire(tmp_path: Path) -> None:
    store, address = host_store("127.0.0.1", 2, timeout_s=30)
    ranks: dict[int, WeightGroup] = {}
    joiner = threading.Thread(
        target=lambda: ranks.update({0: WeightGroup(address, 0, 30, store=store)})
    )
    joiner.start()
    receiver = WeightGroup(address, 1, 30)
    joiner.join()
    sender = ranks[0]
    marker = tmp_path / "ran"
    payload = pickle.dumps(Touch(marker))

    def send() -> None:  # rank 0 as an old or hostile sender: the header, then a pickle
        sender._broadcast(torch.tensor([1, len(payload)], dtype=torch.int64), 1)
        sender._broadcast(torch.frombuffer(bytearray(payload), dtype=torch.uint8), 1)

    thread = threading.Thread(target=send)
    thread.start()
    try:
        with pytest.raises(WeightBroadcastError, match="not the JSON layout"):
            receiver.receive()
    finally:
        thread.join()
        receiver.close()
        sender.close()
    assert not marker.exists()
