"""The shared-memory weight slot: exact round trips, and the synchronizer keeping the
trainer's writes and the explorer's reads apart."""

from __future__ import annotations

import asyncio
import errno
import multiprocessing as mp
import os
from datetime import datetime
from pathlib import Path

import pytest
import torch

from trinity.sync import weight_slot
from trinity.sync.errors import SyncTimeout
from trinity.sync.synchronizer import Synchronizer
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


def dead_pid() -> int:
    child = FORK.Process(target=int)
    child.start()
    child.join()
    return child.pid


FORK = mp.get_context("fork")  # the children share this process's torch: no import


def hold(role: str, path: str, holding, done) -> None:
    """Another process's use of the slot file ``path``: as its writer or as a reader."""
    state = {"w": torch.arange(16, dtype=torch.float32)}
    if role == "writer":
        SlotWriter(path).write(state)
    else:
        SlotReader().read(weight_slot.layout(state, path))
    holding.set()
    done.wait(60)


@pytest.mark.parametrize("role", ["writer", "reader"])
def test_the_cleanup_keeps_a_file_in_use_whatever_its_recorded_pid(
    role: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(weight_slot, "SHM_DIR", tmp_path)
    # another run's files, named after process ids this process sees as dead or as
    # someone else (a reused id, or a driver in another container sharing /dev/shm)
    in_use = tmp_path / f"trinity-weights-{dead_pid()}-inuse"
    stale_dead = tmp_path / f"trinity-weights-{dead_pid()}-gone"
    stale_reused = tmp_path / "trinity-weights-1-reused"  # pid 1 is alive, but not its driver
    other = tmp_path / "unrelated-file"
    for p in (stale_dead, stale_reused, other):
        p.write_bytes(b"x")
    if role == "reader":
        writer = SlotWriter(str(in_use))
        writer.write({"w": torch.arange(16, dtype=torch.float32)})
        writer.close()  # the trainer is done; an engine still maps the file
    holding, done = FORK.Event(), FORK.Event()
    holder = FORK.Process(target=hold, args=(role, str(in_use), holding, done))
    holder.start()
    try:
        assert holding.wait(60)
        path = weight_slot.new_slot_path()
        assert path is not None and Path(path).parent == tmp_path
        assert Path(path).name.startswith(f"trinity-weights-{os.getpid()}-")
        assert in_use.exists() and other.exists()
        assert not stale_dead.exists() and not stale_reused.exists()
        # this driver's own file is held from its creation: a second cleanup keeps it
        assert weight_slot.remove_stale_slots() == []
        assert Path(path).exists()
    finally:
        done.set()
        holder.join(60)
    # the holder is gone: its file is stale now, and only it
    assert weight_slot.remove_stale_slots() == [str(in_use)]
    weight_slot.remove_slot(path)
    assert not Path(path).exists() and other.exists()


def test_without_shared_memory_the_weights_go_through_the_object_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import ray

    from trinity.sync import weights

    assert weight_slot.slot_unavailable("darwin") == "darwin has no /dev/shm"
    monkeypatch.setattr(weight_slot, "SHM_DIR", tmp_path)  # writable, so only the probe says no
    monkeypatch.setattr(weight_slot, "slot_unavailable", lambda: "darwin has no /dev/shm")
    with caplog.at_level("INFO", logger="trinity.sync"):
        path = weight_slot.new_slot_path()
    assert path is None and list(tmp_path.iterdir()) == []
    [record] = caplog.records
    assert "darwin has no /dev/shm" in record.getMessage()
    assert "object store" in record.getMessage()
    # the run's synchronizer then has no slot: the trainer puts each version in the store
    put, calls = [], []
    monkeypatch.setattr(ray, "get", lambda ref: path if ref == "slot-path" else ref)
    monkeypatch.setattr(ray, "put", lambda value: put.append(value) or "object-ref")
    sync = FakeSynchronizer()
    sync.slot_path = FakeRemote(calls, "slot_path", answer="slot-path")
    config = memory_sync_config(tmp_path)
    slot = weights.slot_writer(config, sync)
    assert slot is None
    weights.publish(FakeTrainer(), config, tmp_path, sync, 1, slot=slot)
    assert sync.calls == [("publish", 1, ["object-ref"])] and len(put) == 1


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
    def __init__(self, calls: list, name: str, answer: object = None) -> None:
        self.calls, self.name, self.answer = calls, name, answer

    def remote(self, *args):
        self.calls.append((self.name, *args))
        return self.answer


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
