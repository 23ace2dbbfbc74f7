"""Generate the raw text of the cpt example.

    python examples/cpt/make_data.py

From the arithmetic demo's training tasks (examples/arithmetic/data/train.jsonl), one
short plain-text document per task in examples/cpt/data/train.jsonl, in the ``text``
column: no chat turns, the model continues pre-training on the text as it is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent
TASKS = EXAMPLES / "arithmetic" / "data" / "train.jsonl"
OUT = EXAMPLES / "cpt" / "data" / "train.jsonl"
_QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def rows() -> list[dict]:
    out = []
    for line in TASKS.read_text().splitlines():
        question = json.loads(line)["question"]
        match = _QUESTION.fullmatch(question)
        if match is None:
            raise ValueError(f"{TASKS}: unexpected question {question!r}")
        a, b = int(match.group(1)), int(match.group(2))
        out.append({"text": f"{a} + {b} = {a + b}. Adding {b} to {a} gives {a + b}."})
    return out


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    data = rows()
    OUT.write_text("".join(json.dumps(row) + "\n" for row in data))
    print(f"wrote {len(data)} rows to {OUT}")


if __name__ == "__main__":
    main()
