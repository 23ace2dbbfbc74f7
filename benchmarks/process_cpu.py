"""CPU time of every process a command starts (its descendants), grouped by kind (Ray actor class, Ray's
own daemons, ``trinity run``, pytest workers): where the CPU of a run, or of the whole
test suite, goes.

Polls ``/proc`` every ``--interval`` seconds while the command runs and keeps each new
process's largest user+system time, so a process that lives less than one interval is
missed or undercounted (about 0.2 s each for short ``--dry-run`` processes). Ray names
an actor's worker process ``ray::<Class>`` once the actor starts; the kind is that name.
Linux only.

    python benchmarks/process_cpu.py -- make test
    python benchmarks/process_cpu.py --every -- .venv/bin/trinity run --config C.yaml
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict

from wrapped_command import parse_wrapped

_RAY_DAEMONS = (
    "gcs_server",
    "raylet",
    "log_monitor",
    "dashboard.py",
    "autoscaler/_private/monitor.py",
    "ray.util.client.server",
    "ray start",
)


def kind(cmdline: str) -> str:
    """The group a process's command line falls in."""
    if cmdline.startswith("ray::"):
        return cmdline.split()[0].split(".")[0]
    if "default_worker.py" in cmdline:
        return "ray worker (no actor yet)"
    if "-m trinity" in cmdline or "bin/trinity" in cmdline:
        if "--dry-run" in cmdline:
            return "trinity --dry-run"
        words = cmdline.split(" trinity ", 1)[-1].split()
        return "trinity " + (words[0] if words else "")
    for daemon in _RAY_DAEMONS:
        if daemon in cmdline:
            return daemon
    if "exec(eval(sys.stdin" in cmdline:  # an xdist worker, and what it forks
        return "pytest worker"
    return cmdline[:60]


def _better_name(old: str, new: str) -> str:
    """A Ray worker renames itself ``ray::IDLE``, then ``ray::<Class>`` once its actor
    starts (and ``ray::<Class>.<method>`` while a call runs): keep the first actor name."""
    if old.startswith("ray::") and not old.startswith("ray::IDLE"):
        return old
    if new.startswith("ray::"):
        return new
    return new if len(new) > len(old) else old


def _parent(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[1]
    except OSError:
        return None


def _descends(pid: str, ours: set[str], others: set[str]) -> bool:
    """Whether ``pid`` is the command or one of its descendants (``ours`` and ``others``
    cache the answers; a process whose parent is gone counts as not ours)."""
    chain = []
    while pid not in ours and pid not in others:
        parent = _parent(pid)
        chain.append(pid)
        if parent is None or parent in ("0", "1"):
            others.update(chain)
            return False
        pid = parent
    (ours if pid in ours else others).update(chain)
    return pid in ours


def _stat(pid: str, ticks: int) -> tuple[str, str, float] | None:
    """``(pid:start time, command line, CPU seconds)`` of a live process, else None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline") as f:
            cmdline = f.read().replace("\0", " ").strip()
    except OSError:
        return None
    # utime, stime; the start time tells a reused pid from the process before it
    return f"{pid}:{fields[19]}", cmdline, (int(fields[11]) + int(fields[12])) / ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between polls")
    parser.add_argument("--every", action="store_true", help="also list each process")
    args, command = parse_wrapped(parser)
    ticks = os.sysconf("SC_CLK_TCK")
    seen: dict[str, list] = {}  # pid:start -> [cmdline, cpu, first seen, last seen]
    start = time.monotonic()
    proc = subprocess.Popen(command)
    ours, others = {str(proc.pid)}, set()
    while True:
        now = time.monotonic() - start
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or not _descends(pid, ours, others):
                continue
            got = _stat(pid, ticks)
            if got is None:
                continue
            ident, cmdline, cpu = got
            row = seen.setdefault(ident, [cmdline, cpu, now, now])
            row[1], row[3] = max(row[1], cpu), now
            row[0] = _better_name(row[0], cmdline)
        if proc.poll() is not None:
            break
        time.sleep(args.interval)
    wall = time.monotonic() - start
    groups: dict[str, list[float]] = defaultdict(list)
    for cmdline, cpu, _, _ in seen.values():
        groups[kind(cmdline)].append(cpu)
    total = sum(sum(v) for v in groups.values())
    print(
        f"command exited {proc.returncode} after {wall:.1f} s; CPU of its processes {total:.1f} s"
    )
    print(f"{'CPU s':>8} {'procs':>6} {'mean s':>7}  kind")
    for name, cpus in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        if sum(cpus) >= 0.1:
            print(f"{sum(cpus):8.1f} {len(cpus):6d} {sum(cpus) / len(cpus):7.2f}  {name}")
    if args.every:
        for cmdline, cpu, first, last in sorted(seen.values(), key=lambda r: r[2]):
            if cpu >= 0.1:
                print(f"{cpu:7.2f} {first:7.1f}-{last:7.1f}  {cmdline[:140]}")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
