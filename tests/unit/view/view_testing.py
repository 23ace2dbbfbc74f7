"""Experiences and files for the viewer's tests."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from trinity.buffer import JsonlWriter
from trinity.types import EID, Experience


def experiences(n: int, start: int = 0) -> list[Experience]:
    """Experiences ``start`` .. ``start + n - 1``; number i asks "what is i + i?"."""
    return [
        Experience(
            tokens=torch.tensor([1, 2, 3, 100 + i]),
            prompt_length=3,
            logprobs=torch.tensor([math.log(0.5)]),
            reward=float(i),
            eid=EID(batch=0, task=i, run=0),
            prompt_text=f"what is {i} + {i}?",
            response_text=f"{2 * i}",
        )
        for i in range(start, start + n)
    ]


def write_jsonl(path: Path, exps: list[Experience]) -> None:
    with JsonlWriter(path) as writer:
        writer.write(exps)
