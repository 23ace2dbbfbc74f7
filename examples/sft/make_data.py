"""Generate the demonstration data of the sft, dpo, mix and sft_grpo examples.

    python examples/sft/make_data.py

From the arithmetic demo's training tasks (examples/arithmetic/data/train.jsonl):

- examples/sft/data/train.jsonl: chat conversations (``prompt_type: messages``), a
  system prompt, the question, and the worked answer "a + b = c." as the reply;
- examples/dpo/data/train.jsonl: plaintext preference pairs, the correct reply as
  ``chosen`` and one that is off by one to ten as ``rejected``.

The rows are fixed by a seed, so the files in the repository are reproducible.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent
TASKS = EXAMPLES / "arithmetic" / "data" / "train.jsonl"
SYSTEM = "You are a careful calculator. Answer with the sum."
SEED = 20251123
_QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def tasks() -> list[tuple[str, int, int]]:
    rows = []
    for line in TASKS.read_text().splitlines():
        question = json.loads(line)["question"]
        match = _QUESTION.fullmatch(question)
        if match is None:
            raise ValueError(f"{TASKS}: unexpected question {question!r}")
        rows.append((question, int(match.group(1)), int(match.group(2))))
    return rows


def sft_rows() -> list[dict]:
    return [
        {
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": question},
                {"role": "assistant", "content": f"{a} + {b} = {a + b}."},
            ]
        }
        for question, a, b in tasks()
    ]


def dpo_rows() -> list[dict]:
    rng = random.Random(SEED)
    rows = []
    for question, a, b in tasks():
        wrong = a + b + rng.choice([-1, 1]) * rng.randint(1, 10)
        rows.append(
            {
                "prompt": question,
                "chosen": f"{a} + {b} = {a + b}.",
                "rejected": f"{a} + {b} = {wrong}.",
            }
        )
    return rows


def write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(rows)} rows to {path}")


def main() -> None:
    write(EXAMPLES / "sft" / "data" / "train.jsonl", sft_rows())
    write(EXAMPLES / "dpo" / "data" / "train.jsonl", dpo_rows())


if __name__ == "__main__":
    main()
