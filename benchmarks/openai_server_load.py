"""Latency of small requests to the OpenAI-compatible server, alone and beside abuse.

    nice -n 15 .venv/bin/python benchmarks/openai_server_load.py              # ~3-5 min
    nice -n 15 .venv/bin/python benchmarks/openai_server_load.py --seconds 20 --clients 32

Starts the server (``trinity.rollout.server.OpenAIServer`` on a ``TransformersEngine``
with the built-in SmolLM2-135M-Instruct, or ``--model DIR``) in a child process on
127.0.0.1 with the config's default admission limits, then drives it from this process
with ``--clients`` concurrent clients, each sending small chat requests one after another
(``max_tokens`` ``--max-tokens``, greedy), in two phases of ``--seconds`` each:

0. warm-up: one request per client, not counted;
1. alone: only the small requests;
2. abused: the same, while one client keeps sending a ``--body-mb`` MB body (over
   ``openai_api_max_body_bytes``: 413) and another keeps starting a long streamed request
   (n=8, up to the model's length, ``ignore_eos``) and disconnecting after 1 s.

It prints, per phase, the small requests' count, statuses and p50/p99 latency, what the
abusers got, and the server process's peak RSS (sampled every 50 ms, and the kernel's
high-water mark at the end). Every phase, every request and the whole run are bounded in
time, so the script stops by itself; the server is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
import psutil

NAME = "policy"
PROMPTS = ["What is 2 + 3?", "Name a colour.", "Say hello.", "Count to three."]


def serve(model_dir: str, max_model_len: int) -> None:
    """The child: the server on 127.0.0.1 until stdin closes; prints its base URL."""
    from trinity.rollout.engine import TransformersEngine
    from trinity.rollout.server import OpenAIServer
    from trinity.rollout.wrapper import ModelWrapper

    engine = TransformersEngine(model_dir, max_model_len=max_model_len)
    with OpenAIServer({NAME: ModelWrapper(engine, name=NAME)}, host="127.0.0.1") as server:
        print(server.base_url, flush=True)
        sys.stdin.read()  # the parent closes it to stop us
    engine.close()


@dataclass
class Phase:
    name: str
    latencies: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    abuse: Counter = field(default_factory=Counter)
    peak_rss: int = 0


async def small_client(
    client: httpx.AsyncClient, url: str, k: int, deadline: float, args, phase: Phase
) -> None:
    i = 0
    while time.monotonic() < deadline and i < args.requests:
        body = {
            "model": NAME,
            "messages": [{"role": "user", "content": PROMPTS[(k + i) % len(PROMPTS)]}],
            "max_tokens": args.max_tokens,
            "temperature": 0,
        }
        start = time.perf_counter()
        try:
            response = await client.post(url + "/chat/completions", json=body)
            phase.statuses[response.status_code] += 1
        except httpx.HTTPError as err:
            phase.statuses[type(err).__name__] += 1
            continue
        finally:
            i += 1
        if response.status_code == 200:
            phase.latencies.append(time.perf_counter() - start)


async def oversized_client(url: str, deadline: float, megabytes: float, phase: Phase) -> None:
    text = "word " * int(megabytes * 1e6 / 5)
    body = json.dumps({"model": NAME, "messages": [{"role": "user", "content": text}]})
    async with httpx.AsyncClient(timeout=60) as client:
        while time.monotonic() < deadline:
            try:
                response = await client.post(
                    url + "/chat/completions",
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
                phase.abuse[f"oversized body: {response.status_code}"] += 1
            except httpx.HTTPError as err:  # the server may close before the body is sent
                phase.abuse[f"oversized body: {type(err).__name__}"] += 1
            await asyncio.sleep(0.2)


async def leaving_client(url: str, deadline: float, phase: Phase) -> None:
    body = {
        "model": NAME,
        "messages": [{"role": "user", "content": "Write a long story."}],
        "n": 8,
        "ignore_eos": True,
        "stream": True,
    }
    while time.monotonic() < deadline:
        async with httpx.AsyncClient(timeout=httpx.Timeout(60, read=1.0)) as client:
            try:
                async with client.stream("POST", url + "/chat/completions", json=body) as r:
                    async for _ in r.aiter_bytes():
                        pass
                phase.abuse[f"long stream: finished {r.status_code}"] += 1
            except httpx.ReadTimeout:
                phase.abuse["long stream: left after 1 s"] += 1
            except httpx.HTTPError as err:
                phase.abuse[f"long stream: {type(err).__name__}"] += 1


async def watch_rss(pid: int, deadline: float, phase: Phase) -> None:
    process = psutil.Process(pid)
    while time.monotonic() < deadline:
        phase.peak_rss = max(phase.peak_rss, process.memory_info().rss)
        await asyncio.sleep(0.05)


async def warm_up(url: str, args) -> None:
    """One round of the clients' requests, not counted: the first decode batches of a
    fresh engine pay for its one-time set-up."""
    async with httpx.AsyncClient(timeout=args.timeout) as client:
        phase = Phase("warm-up")
        deadline = time.monotonic() + args.timeout
        once = argparse.Namespace(**{**vars(args), "requests": 1})
        tasks = [small_client(client, url, k, deadline, once, phase) for k in range(args.clients)]
        await asyncio.gather(*tasks)


async def run_phase(name: str, url: str, pid: int, args, abuse: bool) -> Phase:
    phase = Phase(name)
    deadline = time.monotonic() + args.seconds
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    async with httpx.AsyncClient(timeout=args.timeout, limits=limits) as client:
        tasks = [small_client(client, url, k, deadline, args, phase) for k in range(args.clients)]
        tasks.append(watch_rss(pid, deadline + args.timeout, phase))
        if abuse:
            tasks += [
                oversized_client(url, deadline, args.body_mb, phase),
                leaving_client(url, deadline, phase),
            ]
        # the last requests may end up to --timeout after the phase
        await asyncio.wait_for(asyncio.gather(*tasks), args.seconds + 2 * args.timeout)
    return phase


def percentile(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else float("nan")
    )


def report(phase: Phase) -> None:
    lat = phase.latencies
    print(f"\n{phase.name}: {len(lat)} small requests answered; statuses {dict(phase.statuses)}")
    if lat:
        print(
            f"  latency p50 {percentile(lat, 50):.2f} s, p99 {percentile(lat, 99):.2f} s, max {max(lat):.2f} s"
        )
    for what, count in sorted(phase.abuse.items()):
        print(f"  {what}: {count}")
    print(f"  server peak RSS (sampled): {phase.peak_rss / 2**20:.0f} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--model", help="model directory; default: the built-in SmolLM2-135M-Instruct"
    )
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--clients", type=int, default=64, help="concurrent small-request clients")
    parser.add_argument("--seconds", type=float, default=40, help="length of each phase")
    parser.add_argument(
        "--requests", type=int, default=200, help="most requests per client and phase"
    )
    parser.add_argument("--max-tokens", type=int, default=8, help="max_tokens of a small request")
    parser.add_argument("--body-mb", type=float, default=10, help="size of the oversized body")
    parser.add_argument(
        "--timeout", type=float, default=60, help="seconds a small request may take"
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the child: serve this model
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.max_model_len)
        return 0

    # the process settings of a run's driver, inherited by the server's process
    from bench_common import default_model_dir

    if args.model is None:
        args.model = str(default_model_dir())
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            args.model,
            "--max-model-len",
            str(args.max_model_len),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = child.stdout.readline().strip()
        if not url.startswith("http://"):
            print("the server did not start", file=sys.stderr)
            return 1
        print(
            f"server {url} (pid {child.pid}), model {args.model}; {args.clients} clients, "
            f"{args.seconds:g} s per phase, max_tokens {args.max_tokens}; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
        asyncio.run(warm_up(url, args))
        phases = [
            asyncio.run(run_phase("alone", url, child.pid, args, abuse=False)),
            asyncio.run(run_phase("abused", url, child.pid, args, abuse=True)),
        ]
        for phase in phases:
            report(phase)
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f} (other work shares the CPUs)")
        with open(f"/proc/{child.pid}/status") as status:
            hwm = next((line.split()[1] for line in status if line.startswith("VmHWM")), None)
        if hwm is not None:
            print(f"\nserver peak RSS over the run (VmHWM): {int(hwm) / 1024:.0f} MiB")
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
