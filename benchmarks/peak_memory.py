"""Run a command and report the peak memory of its whole process tree.

    python benchmarks/peak_memory.py -- .venv/bin/trinity run --config examples/arithmetic/grpo.yaml
    python benchmarks/peak_memory.py --by-process -- make demo

Ray actors are grandchildren of the driver (driver -> raylet -> workers), so the
driver's own max RSS says little. This samples every process below the command twice
a second and sums their proportional set size (PSS: shared pages split between the
processes that map them), printing the peak and the wall time at the end; with
``--by-process``, also each process's share at the moment of the peak.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import psutil
from wrapped_command import parse_wrapped


def tree_pss(root: psutil.Process) -> list[tuple[str, int]]:
    """(process title, PSS bytes) of ``root`` and every process below it."""
    rows = []
    for proc in [root, *root.children(recursive=True)]:
        try:
            info = proc.memory_full_info()
            title = " ".join(proc.cmdline())[:90] or proc.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rows.append((title, getattr(info, "pss", info.rss)))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--by-process", action="store_true", help="print the peak's breakdown")
    args, argv = parse_wrapped(parser)
    start = time.perf_counter()
    child = subprocess.Popen(argv)
    root = psutil.Process(child.pid)
    peak, peak_rows = 0, []
    while child.poll() is None:
        try:
            rows = tree_pss(root)
        except psutil.NoSuchProcess:
            break
        if sum(pss for _, pss in rows) > peak:
            peak, peak_rows = sum(pss for _, pss in rows), rows
        time.sleep(0.5)
    wall = time.perf_counter() - start
    if args.by_process:
        print("processes at the peak (PSS):", file=sys.stderr)
        for title, pss in sorted(peak_rows, key=lambda row: -row[1]):
            print(f"  {pss / 2**30:6.2f} GiB  {title}", file=sys.stderr)
    print(f"peak memory (PSS of the process tree): {peak / 2**30:.2f} GiB", file=sys.stderr)
    print(f"wall time: {wall:.0f} s", file=sys.stderr)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
