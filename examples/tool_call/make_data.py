"""Generate the calculator tasksets: sums and products, from easy to hard without a tool.

    python examples/tool_call/make_data.py [--train 256] [--test 32] [--out DIR]

Each row holds a ``question`` (a sum of two-digit numbers, a one-digit times a
two-digit number, or a three-digit times a two-digit number), its ``answer`` and
``tools``: the OpenAI-style spec of the registered ``calculator`` tool, which
``multi_turn_tool_workflow`` offers the policy. The easy rows give a small model some reward
from the start; the hard ones pay off only through the tool. The seed makes the files
reproducible.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from trinity.workflows.tools import CALCULATOR_SPEC

HERE = Path(__file__).parent / "data"
SEED = 20261123


def make_row(rng: random.Random) -> dict:
    kind = rng.choice(("sum", "small product", "large product"))
    if kind == "sum":
        a, b, op = rng.randint(10, 99), rng.randint(10, 99), "+"
    elif kind == "small product":
        a, b, op = rng.randint(2, 9), rng.randint(10, 99), "*"
    else:
        a, b, op = rng.randint(100, 999), rng.randint(10, 99), "*"
    value = a + b if op == "+" else a * b
    return {
        "question": f"What is {a} {op} {b}? Give the final number.",
        "answer": str(value),
        "tools": [CALCULATOR_SPEC],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=256)
    parser.add_argument("--test", type=int, default=32)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    if args.train < 1 or args.test < 1:
        parser.error("--train and --test must be >= 1")
    rng = random.Random(SEED)
    args.out.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", args.train), ("test", args.test)):
        path = args.out / f"{split}.jsonl"
        path.write_text("".join(json.dumps(make_row(rng)) + "\n" for _ in range(count)))
        print(f"wrote {count} rows to {path}")


if __name__ == "__main__":
    main()
