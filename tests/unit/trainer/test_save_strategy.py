"""``trainer.save_strategy``: which trainer ranks write their checkpoint shards at once."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from trinity.trainer import distributed
from trinity.trainer.distributed import write_turns


def test_turns_of_each_strategy() -> None:
    nodes = ["a", "a", "b", "b", "a"]
    assert write_turns("unrestricted", nodes) == [0, 0, 0, 0, 0]
    assert write_turns("single_process", nodes) == [0, 1, 2, 3, 4]
    assert write_turns("single_thread", nodes) == [0, 1, 2, 3, 4]
    # node a (ranks 0, 1, 4) writes first, then node b
    assert write_turns("single_node", nodes) == [0, 0, 1, 1, 0]
    with pytest.raises(ValueError, match="valid: single_thread, single_process"):
        write_turns("one_at_a_time", nodes)


def _write(times: list[float]) -> None:
    times.append(time.time())
    time.sleep(0.5)
    times.append(time.time())


def _rank_writes(rank: int, port: int, out: str) -> None:
    """One rank of a two-process gloo group: a 0.5 s "write" under each strategy."""
    info = distributed.RankInfo(rank, 2, "127.0.0.1", port)
    distributed.init_process_group(info, timeout_s=60)
    result = {}
    for strategy in ("single_process", "unrestricted"):
        interval: list[float] = []
        turn, turns = distributed.in_turns(strategy, lambda times=interval: _write(times))
        result[strategy] = {"interval": interval, "turn": turn, "turns": turns}
    Path(out, f"rank_{rank}.json").write_text(json.dumps(result))
    distributed.shutdown()


def test_single_process_writes_do_not_overlap(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    # the ranks meet at a store this process hosts, on a port it already holds
    store, info = distributed.host_rendezvous("127.0.0.1", 2, timeout_s=60)
    mp.spawn(_rank_writes, args=(info.master_port, str(tmp_path)), nprocs=2)
    del store
    rank0, rank1 = (json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in (0, 1))
    one = rank0["single_process"], rank1["single_process"]
    assert [r["turn"] for r in one] == [0, 1] and one[0]["turns"] == 2
    # rank 1 starts after rank 0 has finished
    assert one[1]["interval"][0] >= one[0]["interval"][1]
    free = rank0["unrestricted"], rank1["unrestricted"]
    assert [r["turn"] for r in free] == [0, 0] and free[0]["turns"] == 1
    # both write at once: the intervals overlap
    (start0, end0), (start1, end1) = free[0]["interval"], free[1]["interval"]
    assert max(start0, start1) < min(end0, end1)
