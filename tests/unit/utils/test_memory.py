import logging
import platform
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


# In a fresh interpreter (the setting is process-wide): 24 rounds of allocating, touching
# and freeing a 64 MiB tensor (above glibc's largest mmap threshold) and a 3 MiB one,
# printing each round's page faults. torch allocates blocks of 2 MiB and more at 2 MiB
# alignment for huge pages, as trinity sets it up; such a request asks glibc for more
# than the block it freed last round, so depending on where small blocks landed the heap
# may grow for a dozen rounds (seen: up to 12) before freed blocks coalesce into room
# for the next round, and from then on it reuses them.
_REUSE = """
import resource, sys
import torch
from trinity.utils.memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
faults = []
for _ in range(24):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for n in (16 * 2**20, 3 * 2**18):
        t = torch.empty(n)
        t.fill_(1.0)
        del t
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(*faults)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_reuses_touched_pages():
    import os
    import subprocess

    env = {**os.environ, "THP_MEM_ALLOC_ENABLE": "1"}

    def faults(mode: str) -> list[int]:
        out = subprocess.run(
            [sys.executable, "-c", _REUSE, mode], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return [int(n) for n in out.stdout.split()]

    # by default the 64 MiB block is mapped afresh every round: at least one fault per
    # 2 MiB page (one per 4 KiB page without huge pages); kept, the last rounds reuse
    default, kept = faults("default"), faults("keep")
    assert min(default[-4:]) >= 32, default
    assert sum(kept[-4:]) < 20, kept


@pytest.mark.parametrize("keep, kept", [(True, True), (False, False)])
def test_trainer_heap_returns_freed_memory_only_when_not_keeping(
    monkeypatch: pytest.MonkeyPatch, keep: bool, kept: bool
) -> None:
    from trinity.utils import memory

    calls = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: calls.append("keep") or True)
    monkeypatch.setattr(memory, "release_free_memory", lambda: calls.append("release") or True)
    heap = memory.TrainerHeap(keep)
    heap.after_step()
    heap.after_step()
    assert heap.keeps is kept
    assert calls == (["keep"] if keep else ["release", "release"])


def test_without_glibc_mallopt_and_malloc_trim_step_aside_with_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from trinity.utils import memory

    monkeypatch.setattr(memory, "_glibc", lambda: None)  # musl or macOS
    monkeypatch.setattr(memory, "_told", False)
    monkeypatch.setattr(memory, "_kept", False)  # another test of this process may have kept
    with caplog.at_level(logging.INFO, logger="trinity.utils.memory"):
        assert not memory.keep_freed_memory()
        assert not memory.release_free_memory()
        heap = memory.TrainerHeap(keep=True)
        heap.after_step()
    assert not heap.keeps and not memory.keeps_freed_memory()
    lines = [r.getMessage() for r in caplog.records if r.name == "trinity.utils.memory"]
    assert len(lines) == 1 and "no glibc" in lines[0], lines


def test_the_probe_finds_glibc_on_linux() -> None:
    from trinity.utils import memory

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert memory._glibc() is not None
