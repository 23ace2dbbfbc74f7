"""Run a command and report the peak memory of its whole process tree.

    python benchmarks/peak_memory.py -- .venv/bin/trinity run --config examples/arithmetic/grpo.yaml

Ray actors are grandchildren of the driver (driver -> raylet -> workers), so the
driver's own max RSS says little. This samples every process below the command twice
a second and sums their proportional set size (PSS: shared pages split between the
processes that map them), printing the peak and the wall time at the end.
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil


def tree_pss(root: psutil.Process) -> int:
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            info = proc.memory_full_info()
            total += getattr(info, "pss", info.rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print(__doc__)
        return 2
    start = time.perf_counter()
    child = subprocess.Popen(argv)
    root = psutil.Process(child.pid)
    peak = 0
    while child.poll() is None:
        try:
            peak = max(peak, tree_pss(root))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.5)
    wall = time.perf_counter() - start
    print(f"peak memory (PSS of the process tree): {peak / 2**30:.2f} GiB", file=sys.stderr)
    print(f"wall time: {wall:.0f} s", file=sys.stderr)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
