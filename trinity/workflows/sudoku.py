"""``sudoku_workflow``: solve a Sudoku a few moves at a time, one experience per step.

Each step shows the policy the rules, the step count and the current board (a fresh
single user message) and reads up to ``max_moves_per_step`` moves, one ``row col value``
per line, from its reply (:mod:`trinity.rewards.sudoku`). The step's reward (component
``sudoku``) is -1 for an unreadable reply, a move onto a filled cell or a clash, which
ends the game; 1 when the board is solved, which ends it too; else 0, and the game goes
on with the moves applied, for at most ``max_steps`` steps. Each of ``repeat_times``
games is one ``eid.run``; its steps are numbered by ``eid.step``.

The board is the row's ``puzzle`` column (9 lists of 9 integers or 81 digits, 0 empty);
a row without one gets a puzzle generated from the row's ``seed`` (else the task's index)
with ``holes`` empty cells. ``workflow_args``: ``max_steps`` (20),
``max_moves_per_step`` (5), ``holes`` (40).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from trinity.rewards.sudoku import Board, parse_grid, step_reward
from trinity.types import Experience
from trinity.workflows.args import args_error, read_args
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import rollout_args, set_reward

NAME = "sudoku_workflow"
PROMPT = (
    "Solve this Sudoku. The board has 9 rows and 9 columns, numbered 0 to 8; 0 marks an "
    "empty cell. Fill empty cells only, so that every row, column and 3x3 box holds each "
    "digit 1-9 exactly once.\n"
    "Reply with 1 to {max_moves} moves, one per line, each written as: row column digit\n"
    "For example:\n0 2 4\n1 3 5\n\n"
    "Step {step} of {max_steps}. The board:\n{board}\n"
)


@dataclass
class SudokuArgs:
    max_steps: int = 20  # replies per game
    max_moves_per_step: int = 5  # moves one reply may make
    holes: int = 40  # empty cells of a generated puzzle

    def __post_init__(self) -> None:
        for key in ("max_steps", "max_moves_per_step"):
            if getattr(self, key) < 1:
                raise args_error(NAME, key, getattr(self, key), "it must be >= 1")
        if not 0 <= self.holes <= 81:
            raise args_error(NAME, "holes", self.holes, "it must be in [0, 81]")


def render_board(board: Board) -> str:
    """The board as 9 lines of space-separated digits."""
    return "\n".join(" ".join(str(v) for v in row) for row in board)


def generate_puzzle(rng: random.Random, holes: int) -> tuple[Board, Board]:
    """A random solved board and a copy with ``holes`` cells emptied.

    The solution is the pattern ``(3r + r // 3 + c) % 9`` with its digits relabelled,
    rows shuffled within each band of three and the bands shuffled, columns likewise:
    each of these keeps every row, column and box a permutation of 1-9.
    """
    digits = rng.sample(range(1, 10), 9)

    def order() -> list[int]:
        bands = rng.sample(range(3), 3)
        return [3 * band + i for band in bands for i in rng.sample(range(3), 3)]

    rows, columns = order(), order()
    solution = [[digits[(3 * r + r // 3 + c) % 9] for c in columns] for r in rows]
    puzzle = [row[:] for row in solution]
    for cell in rng.sample(range(81), holes):
        puzzle[cell // 9][cell % 9] = 0
    return puzzle, solution


@WORKFLOWS.register(NAME)
class SudokuWorkflow(Workflow):
    """Sudoku games, one experience per reply, rewarded step by step."""

    reads_prompt = False  # the prompt is built from the board

    async def run_async(self) -> list[Experience]:
        args = read_args(self.task, SudokuArgs, NAME)
        raw = self.task.raw
        if raw.get("puzzle") is not None:
            board = parse_grid(raw["puzzle"], "puzzle")
        else:
            seed = raw.get("seed", f"{self.task.taskset}/{self.task.index}")
            board, _ = generate_puzzle(random.Random(seed), args.holes)
        games = await asyncio.gather(
            *(self._game(board, args, run) for run in range(self.task.repeat_times))
        )
        return [exp for steps in games for exp in steps]

    async def _game(self, board: Board, args: SudokuArgs, run: int) -> list[Experience]:
        steps: list[Experience] = []
        for step in range(args.max_steps):
            prompt = PROMPT.format(
                max_moves=args.max_moves_per_step,
                step=step + 1,
                max_steps=args.max_steps,
                board=render_board(board),
            )
            messages = [{"role": "user", "content": prompt}]
            [exp] = await self.model.achat(messages, n=1, **rollout_args(self.task))
            reward, board = step_reward(board, exp.response_text or "", args.max_moves_per_step)
            set_reward(exp, {"sudoku": reward}, "sudoku checker")
            exp.eid.run, exp.eid.step = run, step
            steps.append(exp)
            if reward != 0.0:  # a wrong move or the solution ends the game
                break
        return steps
