"""Generate the arithmetic demo's tasksets: additions of two whole numbers from 1 to 20.

    python examples/arithmetic/make_data.py

Every ordered pair (a, b) appears exactly once across the two files: 64 pairs are held
out for evaluation (test.jsonl), the other 336 are the training tasks (train.jsonl). The
split is fixed by a seed, so the files in the repository are reproducible.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent / "data"
EVAL_SIZE = 64
SEED = 20251122


def rows() -> list[dict[str, str]]:
    pairs = [(a, b) for a in range(1, 21) for b in range(1, 21)]
    return [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in pairs]


def main() -> None:
    data = rows()
    random.Random(SEED).shuffle(data)
    HERE.mkdir(parents=True, exist_ok=True)
    for name, part in (("test", data[:EVAL_SIZE]), ("train", data[EVAL_SIZE:])):
        with open(HERE / f"{name}.jsonl", "w") as f:
            for row in part:
                f.write(json.dumps(row) + "\n")
        print(f"wrote {len(part)} tasks to {HERE / f'{name}.jsonl'}")


if __name__ == "__main__":
    main()
