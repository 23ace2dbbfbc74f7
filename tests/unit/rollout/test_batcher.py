import threading
import time

import pytest

from trinity.rollout.batcher import DELIVERED, RequestBatcher


@pytest.fixture
def seen() -> list:
    """What the worker ran, in order: ("batch", items, thread name) or ("call",)."""
    return []


@pytest.fixture
def batcher(seen: list):
    def run(items):
        seen.append(("batch", list(items), threading.current_thread().name))
        time.sleep(0.05)
        return [i * 10 for i in items]

    batcher = RequestBatcher(run, size_of=lambda i: 1, max_size=8, window_s=0.01, name="worker")
    yield batcher
    batcher.close()


def test_call_runs_on_the_worker_thread_after_queued_items(batcher, seen):
    first = batcher.submit(1)
    result = batcher.call(lambda: (seen.append(("call",)), threading.current_thread().name))
    assert result[1] == "worker"
    assert first.result() == 10
    # the call ran after the batch that was queued before it, and alone
    assert [entry[0] for entry in seen] == ["batch", "call"]
    assert seen[0][2] == "worker"


def test_call_between_submissions_splits_the_batch(batcher, seen):
    futures = [batcher.submit(1), batcher.submit(2)]
    marker = threading.Thread(target=batcher.call, args=(lambda: seen.append(("call",)),))
    marker.start()
    marker.join()
    futures.append(batcher.submit(3))
    assert [f.result() for f in futures] == [10, 20, 30]
    kinds = [entry[0] for entry in seen]
    assert kinds.index("call") > 0 and "batch" in kinds[kinds.index("call") :]
    # items queued after the call never share a batch with items before it
    after = [entry[1] for entry in seen[kinds.index("call") + 1 :]]
    assert all(3 in items and 1 not in items for items in after)


def test_call_errors_reach_the_caller_and_the_worker_survives(batcher):
    with pytest.raises(ZeroDivisionError):
        batcher.call(lambda: 1 / 0)
    assert batcher.submit(4).result() == 40
    # a call made from the worker itself runs at once instead of deadlocking
    assert batcher.call(lambda: batcher.call(lambda: "nested")) == "nested"
    batcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        batcher.call(lambda: None)


def test_an_item_cancelled_while_it_waits_is_left_out_of_its_batch(batcher, seen):
    # a call holds the worker, so the items wait in the queue meanwhile
    running, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=batcher.call, args=(lambda: running.set() or release.wait(),))
    holder.start()
    running.wait()
    kept, dropped = batcher.submit(1), batcher.submit(2)
    assert dropped.cancel()
    release.set()
    holder.join()
    assert kept.result() == 10
    assert [entry[1] for entry in seen if entry[0] == "batch"] == [[1]]


def test_a_running_batch_takes_in_what_queued_until_a_call_and_delivers_early():
    """run_batch takes the items queued while it runs (up to max_size, not past a call),
    resolves their futures and its own item's early (DELIVERED), and the call and the
    item queued after it run afterwards, in order."""
    started, order = threading.Event(), []
    queued = threading.Event()

    def run(items):
        if items == [1]:
            started.set()
            queued.wait(5)
            taken = holder.take_waiting(2)
            assert [item for item, _ in taken] == [2, 3]  # 4 would pass max_size 2
            for item, future in taken:
                future.set_running_or_notify_cancel()
                future.set_result(item * 10)
            assert holder.take_waiting(2) == []  # next: the call
            order.append("batch")
            return [DELIVERED]
        order.append(("batch", items))
        return [i * 10 for i in items]

    holder = RequestBatcher(run, size_of=lambda i: 1, max_size=8, window_s=0.0)
    try:
        first = holder.submit(1)
        started.wait(5)
        later = [holder.submit(i) for i in (2, 3)]
        call = threading.Thread(target=holder.call, args=(lambda: order.append("call"),))
        call.start()
        time.sleep(0.1)  # the call is queued after 2 and 3
        last = holder.submit(4)
        queued.set()
        assert [f.result(5) for f in later] == [20, 30]
        assert last.result(5) == 40
        call.join(5)
        assert not first.done()  # delivered means the batch resolves it itself: it did not
        assert order == ["batch", "call", ("batch", [4])]
    finally:
        holder.close()
