"""Text environments for multi-turn workflows, registered by name.

An environment is built for one task row (plus ``workflow_args.env_args``), opens with
an observation, answers each action of the policy with the next observation, and at
the end scores the episode with named reward components.

The shipped one is ``guess_number``: the policy guesses a hidden integer and is told
"higher" or "lower" until it finds it.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from trinity.utils.registry import Registry

ENVIRONMENTS: Registry = Registry("environment")


@dataclass
class Step:
    """An environment's answer to one action."""

    observation: str  # shown to the policy as the next user message (unless done)
    done: bool


class TextEnv(ABC):
    """One episode of a text game; built per task row."""

    @abstractmethod
    def reset(self) -> str:
        """The opening observation."""

    @abstractmethod
    def step(self, action: str) -> Step:
        """React to the policy's reply."""

    @abstractmethod
    def rewards(self) -> dict[str, float]:
        """Reward components of the episode so far; the reward is their sum."""


_INTEGER = re.compile(r"-?\d+")


@ENVIRONMENTS.register("guess_number")
class GuessNumberEnv(TextEnv):
    """Find a hidden integer in ``[low, high]`` from "higher" / "lower" hints.

    Task columns: ``target`` (required), ``low`` and ``high`` (default 1 and 100).
    Rewards: ``accuracy`` 1.0 when the number was found; ``format`` 0.1 times the
    fraction of replies that held a guess (the last integer of the reply).
    """

    def __init__(self, row: dict[str, Any], format_score: float = 0.1) -> None:
        if "target" not in row:
            raise KeyError(
                f"guess_number task needs a 'target' column; its columns are {sorted(row)}"
            )
        self.low = int(row.get("low", 1))
        self.high = int(row.get("high", 100))
        self.target = int(row["target"])
        if not self.low <= self.target <= self.high:
            raise ValueError(
                f"guess_number target {self.target} is outside [{self.low}, {self.high}]"
            )
        self.format_score = format_score
        self.solved = False
        self.replies = 0
        self.guesses = 0

    def reset(self) -> str:
        return (
            f"I am thinking of an integer between {self.low} and {self.high}. Guess it: "
            "reply with one number. After each guess I will say higher or lower."
        )

    def step(self, action: str) -> Step:
        self.replies += 1
        found = _INTEGER.findall(action)
        if not found:
            return Step(
                f"Reply with a single integer between {self.low} and {self.high}.", done=False
            )
        self.guesses += 1
        guess = int(found[-1])
        if guess == self.target:
            self.solved = True
            return Step(f"Correct, it is {self.target}.", done=True)
        return Step(
            f"{guess} is wrong. The number is {'higher' if guess < self.target else 'lower'}.",
            done=False,
        )

    def rewards(self) -> dict[str, float]:
        valid = self.guesses / self.replies if self.replies else 0.0
        return {"accuracy": float(self.solved), "format": self.format_score * valid}
