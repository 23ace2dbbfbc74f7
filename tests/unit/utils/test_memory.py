import sys

import psutil
import pytest
import torch

from trinity.utils.memory import release_free_memory


def _rss() -> int:
    return psutil.Process().memory_info().rss


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_returns_fragmented_heap_pages():
    # 100 KB blocks stay below glibc's mmap threshold, so they come from the heap; the
    # last one stays alive and pins the top of the heap, so freeing the others does not
    # shrink the heap by itself
    blocks = [torch.ones(25_000) for _ in range(3000)]  # ~300 MB, every page touched
    keep = blocks[-1]
    del blocks
    before = _rss()
    assert release_free_memory()
    released = before - _rss()
    assert released > 200 * 2**20, f"released only {released / 2**20:.0f} MiB"
    assert keep.sum().item() == 25_000  # live data untouched
