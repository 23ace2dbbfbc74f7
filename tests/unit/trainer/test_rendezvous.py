"""The trainer group's rendezvous: rank 0's store listens before any other rank hears
of its port, so a process that grabs the port in between cannot break the group."""

from __future__ import annotations

import queue
import socket
from dataclasses import replace

import torch.multiprocessing as mp

from trinity.trainer import distributed


def _rank(info: distributed.RankInfo, results) -> None:
    import torch
    import torch.distributed as dist

    distributed.init_process_group(info, timeout_s=60)
    total = torch.tensor([info.rank + 1.0])
    dist.all_reduce(total)
    results.put((info.rank, float(total)))
    distributed.shutdown()


def _rank0(results) -> None:
    """Rank 0 forms a group of two; between the port's choice and rank 1's joining,
    another process tries to take the port."""
    import torch
    import torch.distributed as dist

    ctx = mp.get_context("spawn")
    squatter = socket.socket()
    others = []

    def start_others(info: distributed.RankInfo) -> None:
        try:  # as another program binding "its" free port would
            squatter.bind(("", info.master_port))
            squatter.listen()
            results.put(("squatter", "took the port"))
        except OSError:
            results.put(("squatter", "port in use"))
        others.append(ctx.Process(target=_rank, args=(replace(info, rank=1), results)))
        others[0].start()

    distributed.start_group("127.0.0.1", 2, start_others, timeout_s=60)
    total = torch.tensor([1.0])
    dist.all_reduce(total)
    results.put((0, float(total)))
    distributed.shutdown()
    others[0].join(60)
    squatter.close()


def test_a_port_taken_between_choice_and_use_does_not_break_the_rendezvous() -> None:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    rank0 = ctx.Process(target=_rank0, args=(results,))
    rank0.start()
    rank0.join(180)
    if rank0.is_alive():
        rank0.kill()
    got = {}
    try:
        while len(got) < 3:
            key, value = results.get(timeout=5)
            got[key] = value
    except queue.Empty:
        pass
    assert rank0.exitcode == 0, got
    # the store held the port already; both ranks summed 1 + 2
    assert got == {"squatter": "port in use", 0: 3.0, 1: 3.0}
