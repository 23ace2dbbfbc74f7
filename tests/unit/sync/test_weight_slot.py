"""The shared-memory weight slot: exact round trips, and the synchronizer keeping the
trainer's writes and the explorer's reads apart."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import torch

from trinity.sync import weight_slot
from trinity.sync.synchronizer import Synchronizer, SyncTimeout
from trinity.sync.weight_slot import SlotFull, SlotReader, SlotWriter


def state(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(7, 5, generator=g).to(torch.bfloat16),
        "norm.weight": torch.randn(5, generator=g),  # fp32 beside bf16
        "odd": torch.randn(3, generator=g).to(torch.bfloat16),  # 6 bytes: the next is realigned
        "head.weight": torch.randn(2, 3, 4, generator=g).to(torch.bfloat16).transpose(0, 1),
        "scalar": torch.tensor(3.0),
    }


def test_each_version_reads_back_bit_for_bit(tmp_path: Path) -> None:
    writer, reader = SlotWriter(str(tmp_path / "slot")), SlotReader()
    for seed in (1, 2):  # the second version overwrites the first in place
        sent = state(seed)
        version = writer.write(sent)
        got = reader.read(version)
        assert list(got) == list(sent)
        for name, tensor in sent.items():
            assert got[name].dtype == tensor.dtype and got[name].shape == tensor.shape
            assert torch.equal(got[name], tensor), name
        assert all(e.offset % 64 == 0 for e in version.entries)
        del got
    assert os.path.getsize(tmp_path / "slot") == version.size
    reader.close()
    writer.close()


def test_a_state_of_another_size_remaps_both_ends(tmp_path: Path) -> None:
    writer, reader = SlotWriter(str(tmp_path / "slot")), SlotReader()
    reader.read(writer.write(state(1)))
    bigger = {"w": torch.arange(1000, dtype=torch.float32)}
    got = reader.read(writer.write(bigger))
    assert torch.equal(got["w"], bigger["w"])


def test_slots_of_drivers_that_are_gone_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(weight_slot, "SHM_DIR", tmp_path)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f"trinity-weights-{dead.stdout.strip()}-abc"
    live = tmp_path / f"trinity-weights-{os.getpid()}-def"
    other = tmp_path / "unrelated-file"
    for p in (stale, live, other):
        p.write_bytes(b"x")
    path = weight_slot.new_slot_path()
    assert path is not None and Path(path).parent == tmp_path
    assert Path(path).name.startswith(f"trinity-weights-{os.getpid()}-")
    assert not stale.exists() and live.exists() and other.exists()
    weight_slot.remove_slot(str(live))
    assert not live.exists()


def test_the_trainer_waits_for_a_reader_and_readers_wait_for_the_writer() -> None:
    async def scenario() -> list[str]:
        sync, events = Synchronizer("unused"), []
        await sync.publish(1, ["v1"])
        version, weights = await sync.begin_read(timeout=5)  # the explorer copies version 1
        assert (version, weights) == (1, ["v1"])

        async def trainer() -> None:
            await sync.begin_write(timeout=5)
            events.append("write begins")
            await asyncio.sleep(0.05)
            events.append("write ends")
            await sync.publish(2, ["v2"])

        async def late_reader() -> None:
            await asyncio.sleep(0.02)
            while "write begins" not in events:
                await asyncio.sleep(0.005)
            got = await sync.begin_read(timeout=5)
            events.append(f"read {got[0]}")
            await sync.end_read()

        task = asyncio.ensure_future(trainer())
        await asyncio.sleep(0.05)
        assert events == []  # the write waits for the reader of version 1
        events.append("read 1 ends")
        await sync.end_read()
        await asyncio.gather(task, late_reader())
        return events

    assert asyncio.run(scenario()) == ["read 1 ends", "write begins", "write ends", "read 2"]


def test_a_reader_that_never_finishes_fails_the_write_with_a_clear_error() -> None:
    async def scenario() -> None:
        sync = Synchronizer("unused")
        await sync.publish(1, ["v1"])
        await sync.begin_read(timeout=5)
        await sync.begin_write(timeout=0.1)

    with pytest.raises(SyncTimeout, match="did not finish copying policy version 1"):
        asyncio.run(scenario())


def test_a_writer_that_never_publishes_fails_the_read_with_a_clear_error() -> None:
    async def scenario() -> None:
        sync = Synchronizer("unused")
        await sync.publish(1, ["v1"])
        await sync.begin_write(timeout=5)  # the trainer starts overwriting, then dies
        # the outer bound turns a read that waits forever into a failure of this test
        await asyncio.wait_for(sync.begin_read(timeout=0.1), 10)

    with pytest.raises(SyncTimeout, match="began overwriting policy version 1"):
        asyncio.run(scenario())


def no_space(fd: int, offset: int, length: int) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_file_system_too_small_for_a_version_is_said_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    writer = SlotWriter(str(tmp_path / "slot"))
    with pytest.raises(SlotFull, match="cannot hold one version of the weights"):
        writer.write(state(1))
    assert os.path.getsize(tmp_path / "slot") == 0  # no pages left promised


class FakeRemote:
    def __init__(self, calls: list, name: str) -> None:
        self.calls, self.name = calls, name

    def remote(self, *args):
        self.calls.append((self.name, *args))


class FakeSynchronizer:
    def __init__(self) -> None:
        self.calls: list = []
        self.begin_write = FakeRemote(self.calls, "begin_write")
        self.publish = FakeRemote(self.calls, "publish")


class FakeTrainer:
    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        return state(3)


def test_publishing_falls_back_to_the_object_store_when_the_slot_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from trinity.sync import weights

    put = []
    monkeypatch.setattr(ray, "get", lambda ref: ref)
    monkeypatch.setattr(ray, "put", lambda value: put.append(value) or "object-ref")
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    config = memory_sync_config(tmp_path)
    slot, sync = SlotWriter(str(tmp_path / "slot")), FakeSynchronizer()
    for step in (1, 2):
        weights.publish(FakeTrainer(), config, tmp_path, sync, step, slot=slot)
    assert not slot.usable
    # the first version found the slot full and went through the store; so did the next
    assert sync.calls == [
        ("begin_write", config.synchronizer.sync_timeout),
        ("publish", 1, ["object-ref"]),
        ("publish", 2, ["object-ref"]),
    ]
    assert len(put) == 2 and torch.equal(
        weights.from_object_store(put[0])["embed.weight"], state(3)["embed.weight"]
    )


def memory_sync_config(tmp_path: Path):
    from trinity.config import config_from_dict, resolve

    return resolve(
        config_from_dict(
            {
                "project": "p",
                "name": "n",
                "checkpoint_root_dir": str(tmp_path),
                "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
                "model": {"model_path": "m", "max_prompt_tokens": 8, "max_response_tokens": 8},
                "buffer": {"batch_size": 1},
                "synchronizer": {"sync_method": "memory"},
            }
        ),
        now=datetime(2025, 1, 1),
    )


class ReadingSynchronizer:
    """Named version 1 in the slot; by the time the explorer pins it, the trainer has
    published version 2 (through the object store: its slot was full)."""

    def __init__(self, calls: list) -> None:
        self.begin_read = FakeRemote(calls, "begin_read")
        self.end_read = FakeRemote(calls, "end_read")


def test_the_explorer_reads_the_version_it_pinned_wherever_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from trinity.sync import weights

    calls: list = []
    newer = weights.to_object_store(state(2))
    answers = {"begin_read": (2, ["ref-2"]), "end_read": None}
    monkeypatch.setattr(ray, "get", lambda ref: newer if ref == "ref-2" else answers[calls[-1][0]])
    receiver = weights.WeightReceiver(
        memory_sync_config(tmp_path), tmp_path, ReadingSynchronizer(calls), "m"
    )
    slot_version = weight_slot.layout(state(1), str(tmp_path / "slot"))
    version, got = receiver._fetch(1, [slot_version], current=0)
    assert version == 2 and torch.equal(got["norm.weight"], state(2)["norm.weight"])
    receiver.release()
    receiver.release()  # once only
    assert [c[0] for c in calls] == ["begin_read", "end_read"]
