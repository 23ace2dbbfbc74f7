"""``sync_method: nccl``: weights broadcast over a process group of their own (gloo here).

* the broadcast itself between two processes, the sender also being in a default
  process group (as a data-parallel trainer's rank 0 is);
* a broadcast without a sender, and a group that never fills, fail within the timeout;
* through a real synchronizer actor: the explorer gets the newest staged version, and a
  sender that could not form the group tells the explorer why;
* ``trinity run`` with two rollout engines: every engine ends up holding bit for bit the
  weights the trainer published (its final checkpoint, in the rollout dtype).
"""

from __future__ import annotations

import io
import json
import multiprocessing as mp
import queue
import re
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from cli_testing import DEMO, run_demo

from trinity.sync.collective import (
    GroupAddress,
    WeightBroadcastError,
    WeightGroup,
    fingerprint,
    host_store,
    pack,
)


def _state(version: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(version)
    return {
        "b.weight": torch.randn(7, 5, generator=g).to(torch.bfloat16),
        "a.bias": torch.randn(3, generator=g),
        "c.steps": torch.tensor(version, dtype=torch.int64),  # 0-dim
        "d.big": torch.randn(40, 33, generator=g, dtype=torch.float64),
    }


def _sender(queue) -> None:
    # a process already in a default process group joins a second, independent one
    from trinity.trainer import distributed

    default_store, info = distributed.host_rendezvous("127.0.0.1", 1, timeout_s=60)
    distributed.init_process_group(info, default_store, timeout_s=60)
    store, address = host_store("127.0.0.1", 2, timeout_s=60)
    queue.put(address)
    group = WeightGroup(address, 0, 60, store=store)
    for version in (1, 2):
        # small buckets: the tensors spread over several
        group.send(pack(_state(version), version, bucket_bytes=600))
    group.send_close()
    group.close()
    dist.barrier()  # the default group still works


def _receiver(address_queue, out) -> None:
    group = WeightGroup(address_queue.get(timeout=120), 1, 60)
    while True:
        version, state = group.receive()
        if state is None:
            break
        # as bytes: a tensor put on a queue is shared memory that dies with this process
        buffer = io.BytesIO()
        torch.save({k: v.clone() for k, v in state.items()}, buffer)
        out.put((version, fingerprint(state), buffer.getvalue()))
    group.close()
    out.put(None)


def test_broadcast_between_two_processes() -> None:
    ctx = mp.get_context("spawn")
    addresses, out = ctx.Queue(), ctx.Queue()
    procs = [
        ctx.Process(target=_sender, args=(addresses,)),
        ctx.Process(target=_receiver, args=(addresses, out)),
    ]
    for p in procs:
        p.start()
    try:
        received = list(iter(lambda: _next(out, procs), None))
        for p in procs:
            p.join(timeout=60)
        assert [p.exitcode for p in procs] == [0, 0]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    assert [r[0] for r in received] == [1, 2]
    for version, print_, raw in received:
        state = torch.load(io.BytesIO(raw), weights_only=True)
        expected = _state(version)
        assert print_ == fingerprint(expected)
        assert state.keys() == expected.keys()
        for name, tensor in expected.items():
            assert state[name].dtype == tensor.dtype and torch.equal(state[name], tensor), name
    assert received[0][1] != received[1][1]


def _next(out, procs: list) -> object:
    """The next result, failing at once when a process died without sending it."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            return out.get(timeout=1)
        except queue.Empty:
            assert all(p.exitcode in (None, 0) for p in procs), [p.exitcode for p in procs]
    raise AssertionError("no result from the receiver in 120 s")


def _pair_in_threads(timeout_s: float) -> tuple[WeightGroup, WeightGroup]:
    """Ranks 0 and 1 of a group in this process (rank 0 joins in a thread)."""
    store, address = host_store("127.0.0.1", 2, timeout_s)
    ranks: dict[int, WeightGroup] = {}
    joiner = threading.Thread(
        target=lambda: ranks.update({0: WeightGroup(address, 0, timeout_s, store=store)})
    )
    joiner.start()
    ranks[1] = WeightGroup(address, 1, timeout_s)
    joiner.join()
    return ranks[0], ranks[1]


def test_receive_without_a_sender_fails_within_the_timeout() -> None:
    sender, receiver = _pair_in_threads(timeout_s=1.5)
    start = time.monotonic()
    with pytest.raises(WeightBroadcastError, match=r"did not complete .*sync_timeout=1.5s"):
        receiver.receive()
    assert time.monotonic() - start < 30
    receiver.close()
    sender.close()


def test_joining_a_group_that_never_fills_fails_within_the_timeout() -> None:
    store, address = host_store("127.0.0.1", 2, timeout_s=1.5)
    assert isinstance(address, GroupAddress) and address.port > 0 and address.backend == "gloo"
    start = time.monotonic()
    with pytest.raises(WeightBroadcastError, match="could not join the weight group"):
        WeightGroup(address, 0, 1.5, store=store)
    assert time.monotonic() - start < 30


@pytest.mark.slow
def test_run_broadcasts_the_published_weights_to_every_engine(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    from trinity.trainer import checkpoint as ckpt

    overrides = [
        "name=bcast",
        "continue_from_checkpoint=true",
        "buffer.total_steps=2",
        "synchronizer.sync_method=nccl",
        "synchronizer.sync_timeout=120",
        "explorer.rollout_model.engine_num=2",
        "explorer.runner_per_model=4",
        "explorer.eval_on_startup=false",
        "buffer.explorer_input.eval_tasksets=[]",
        "model.max_response_tokens=8",
        # a checkpoint of each step, both kept (the demo keeps its last one only)
        "trainer.save_interval=1",
        "trainer.trainer_config.trainer.max_actor_ckpt_to_keep=null",
        "log.level=DEBUG",
        "buffer.trainer_input.experience_buffer.path=null",
    ]
    result = run_demo(tiny_model_dir, tmp_path, *overrides)
    assert result.returncode == 0, result.stderr[-4000:]
    job = tmp_path / "trinity-demo" / "bcast"
    trainer_log = (job / "log" / "trainer.log").read_text()
    explorer_log = (job / "log" / "explorer.log").read_text()
    assert "weight group ready: 3 members over gloo" in trainer_log
    assert "weight group closed" in trainer_log and "left the weight group" in explorer_log

    published = dict(re.findall(r"policy version (\d) fingerprint ([0-9a-f]+)", trainer_log))
    held: dict[str, set[str]] = {}
    for engine, version, print_ in re.findall(
        r"engine (\d) holds policy version (\d) fingerprint ([0-9a-f]+)", explorer_log
    ):
        held.setdefault(version, set()).add(print_)
        assert engine in "01"
    # the trainer's weights of each step (its checkpoint), in the rollout dtype: the
    # config's bf16, or float32 where trinity run said it computes bf16 in float32
    said = "computes in float32 here" in result.stdout + result.stderr
    dtype = torch.float32 if said else torch.bfloat16
    on_disk = {
        str(step): fingerprint(
            {k: v.to(dtype) for k, v in ckpt.load_actor_shard(job, step, "model").items()}
        )
        for step in (1, 2)
    }
    assert published == on_disk
    assert held == {v: {print_} for v, print_ in on_disk.items()}  # both engines, each version
    initial = load_file(tiny_model_dir / "model.safetensors")
    assert on_disk["1"] != on_disk["2"] != fingerprint({k: v.to(dtype) for k, v in initial.items()})
    rows = [
        json.loads(line)
        for line in (job / "monitor" / "bcast_explorer_metrics.jsonl").read_text().splitlines()
    ]
    assert [r["rollout/model_version"] for r in rows if "rollout/model_version" in r] == [0, 1]


@pytest.fixture(scope="module")
def local_ray(ray_client):
    """Ray for this module's tests: the suite's shared head (tests/conftest.py)."""
    return ray_client


@pytest.mark.slow  # starts a local Ray instance
def test_sender_and_receiver_through_the_synchronizer(
    local_ray, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The explorer gets the newest staged version; a sender that cannot form the group
    tells the explorer why through the synchronizer."""
    import logging

    from trinity.config import load_config
    from trinity.explorer.engines import RolloutEngines
    from trinity.rollout.engine import TransformersEngine
    from trinity.sync.collective import WeightGroupReceiver, WeightSender
    from trinity.sync.synchronizer import Synchronizer

    ray = local_ray
    logger = logging.getLogger("test.collective")
    config = load_config(
        DEMO, [f"model.model_path={tiny_model_dir}", f"checkpoint_root_dir={tmp_path}"]
    )
    sync = ray.remote(Synchronizer).remote()
    sender = WeightSender(config, sync, logger, host="127.0.0.1")
    engine = TransformersEngine(str(tiny_model_dir), dtype="bfloat16")
    receiver = WeightGroupReceiver(config, sync, RolloutEngines([engine]), dict, logger)
    try:
        base = {k: v.clone() for k, v in engine.model.state_dict().items()}
        newer = {k: v + 0.5 for k, v in base.items()}
        sender.stage(1, base)
        sender.stage(2, newer)  # published before the explorer asks: it gets this one
        ray.get(sync.publish.remote(2, None))
        assert receiver.receive() == 2
        assert engine.model_version == 2
        assert fingerprint(engine.model.state_dict(), list(newer)) == fingerprint(newer)
        receiver.close()
        sender._thread.join(timeout=60)
        assert not sender._thread.is_alive() and sender.error is None
    finally:
        engine.close()

    short = load_config(
        DEMO,
        [
            f"model.model_path={tiny_model_dir}",
            f"checkpoint_root_dir={tmp_path}",
            "synchronizer.sync_timeout=1.5",
        ],
    )
    lonely = ray.remote(Synchronizer).remote()
    failed = WeightSender(short, lonely, logger, host="127.0.0.1")  # no explorer joins
    failed._thread.join(timeout=60)
    with pytest.raises(WeightBroadcastError, match="weight sender failed.*could not join"):
        ray.get(lonely.request_transfer.remote("send"))
    with pytest.raises(WeightBroadcastError, match="failed earlier"):
        failed.stage(1, {"w": torch.zeros(1)})
