"""Generate the countdown tasksets: reach a target from three or four small numbers.

    python examples/countdown/make_data.py [--train 1000] [--test 100] [--out DIR]

Each task is built backwards so it is solvable: random numbers from 1 to 20 are
combined with random + - * / (exact, integer results only) into a target between 1 and
100. Rows hold ``nums`` and ``target`` (read by ``countdown_workflow``), a ready-made
``question``, and ``answer`` = {"numbers", "target"} so ``math_workflow`` with
``countdown_reward`` works on the same files. The seed makes the files reproducible.
"""

from __future__ import annotations

import argparse
import json
import random
from fractions import Fraction
from pathlib import Path

HERE = Path(__file__).parent / "data"
SEED = 20251122
QUESTION = (
    "Using the numbers {numbers}, write an arithmetic expression that equals {target}. "
    "Use + - * / and parentheses, each number at most once, and give the expression "
    "inside <answer> </answer>."
)


def combine(a: Fraction, b: Fraction, rng: random.Random) -> Fraction | None:
    op = rng.choice("+-*/")
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return a / b if b else None


def make_task(rng: random.Random) -> dict | None:
    """One solvable task, or None when the random expression misses the target range."""
    numbers = [rng.randint(1, 20) for _ in range(rng.choice((3, 4)))]
    values = [Fraction(n) for n in numbers]
    rng.shuffle(values)
    total = values[0]
    for value in values[1:]:
        total = combine(total, value, rng)
        if total is None:
            return None
    if total.denominator != 1 or not 1 <= total <= 100:
        return None
    target = int(total)
    return {
        "question": QUESTION.format(numbers=", ".join(map(str, numbers)), target=target),
        "nums": numbers,
        "target": target,
        "answer": {"numbers": numbers, "target": target},
    }


def tasks(count: int, rng: random.Random) -> list[dict]:
    out: list[dict] = []
    while len(out) < count:
        task = make_task(rng)
        if task is not None:
            out.append(task)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=1000, help="training tasks")
    parser.add_argument("--test", type=int, default=100, help="evaluation tasks")
    parser.add_argument("--out", type=Path, default=HERE, help="output directory")
    args = parser.parse_args()
    rng = random.Random(SEED)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, count in (("train", args.train), ("test", args.test)):
        path = args.out / f"{name}.jsonl"
        with open(path, "w") as f:
            for row in tasks(count, rng):
                f.write(json.dumps(row) + "\n")
        print(f"wrote {count} tasks to {path}")


if __name__ == "__main__":
    main()
