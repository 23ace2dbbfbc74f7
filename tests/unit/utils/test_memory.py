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


# In a fresh interpreter (the setting is process-wide): allocate, touch and free a 64 MiB
# tensor (above glibc's largest mmap threshold) and a 3 MiB one, eight times to warm up
# (small blocks placed between rounds can leave holes too small for the next round, so
# the heap may grow for a few rounds before it settles), then three more times,
# counting the page faults of those three rounds. torch allocates blocks of 2 MiB and
# more at 2 MiB alignment for huge pages, as trinity sets it up.
_REUSE = """
import resource, sys
import torch
from trinity.utils.memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def touch():
    for n in (16 * 2**20, 3 * 2**18):
        t = torch.empty(n)
        t.fill_(1.0)
        del t
for _ in range(8):
    touch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    touch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_reuses_touched_pages():
    import os
    import subprocess

    env = {**os.environ, "THP_MEM_ALLOC_ENABLE": "1"}

    def faults(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", _REUSE, mode], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return int(out.stdout.split()[-1])

    # by default the 64 MiB block is mapped afresh each time: at least one fault per
    # 2 MiB page (one per 4 KiB page without huge pages); kept, its pages are reused
    assert faults("default") > 3 * 32
    assert faults("keep") < 20
