"""Generate the guess_number tasksets: a hidden integer to find from higher / lower hints.

    python examples/guess_number/make_data.py [--train 256] [--test 32] [--out DIR]

Each row holds ``target``, ``low`` and ``high``, the columns the ``guess_number``
environment of ``env_workflow`` reads. Ranges are 1-10 or 1-20, so a policy that halves
the interval finds the number within the config's ``max_turns``. The seed makes the
files reproducible.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).parent / "data"
SEED = 20261123
RANGES = ((1, 10), (1, 20))


def make_rows(count: int, rng: random.Random) -> list[dict[str, int]]:
    rows = []
    for _ in range(count):
        low, high = rng.choice(RANGES)
        rows.append({"target": rng.randint(low, high), "low": low, "high": high})
    return rows


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
        path.write_text("".join(json.dumps(row) + "\n" for row in make_rows(count, rng)))
        print(f"wrote {count} rows to {path}")


if __name__ == "__main__":
    main()
