"""Seconds of tiny-model training under libgomp's two wait policies, alone and two
processes side by side: why the test suite (tests/conftest.py) sets
``OMP_WAIT_POLICY=PASSIVE`` for its processes, which share 2 cores between two xdist
workers and the Ray actors of the runs they start.

    .venv/bin/python benchmarks/omp_wait_policy.py             # 40 steps per process
    .venv/bin/python benchmarks/omp_wait_policy.py --steps 10  # quick look

Each process builds a random 2-layer Llama (hidden size 64, the shape of the suite's
tiny model), then times ``--steps`` rounds of one AdamW training step on 16 rows of 40
tokens and 8 short forward passes (a rollout's decode shape): small ops, where a waiting
thread's spin or sleep matters most. The policy is read by libgomp when torch loads, so
each measurement is a fresh process. For each policy (unset: libgomp's default, a
waiting thread spins a while, then sleeps; ACTIVE: it spins until work comes; PASSIVE:
it sleeps at once): two processes at once (the figure
is each one's time), then one alone. The machine's other load counts: run it on a quiet
machine and compare the rows of one run only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = """
import sys, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2,
)
model = LlamaForCausalLM(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
rows = torch.randint(0, 1000, (16, 40))


def step():
    model(rows, labels=rows).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    with torch.no_grad():
        for _ in range(8):
            model(rows[:, :5])


for _ in range(3):
    step()
start = time.perf_counter()
for _ in range(int(sys.argv[1])):
    step()
print(f"{time.perf_counter() - start:.2f}")
"""


def timed(policy: str, steps: int, copies: int) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy != "unset":
        env["OMP_WAIT_POLICY"] = policy
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(steps)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(copies)
    ]
    return [float(p.communicate()[0].strip()) for p in procs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, {args.steps} steps per process")
    for copies in (2, 1):
        for policy in ("unset", "ACTIVE", "PASSIVE"):
            seconds = timed(policy, args.steps, copies)
            print(f"{policy:8s} {copies} at once: " + ", ".join(f"{s:.1f} s" for s in seconds))


if __name__ == "__main__":
    main()
