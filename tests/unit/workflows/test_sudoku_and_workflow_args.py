"""Sudoku checking on hand-made boards, the puzzles sudoku_workflow generates, and the
one-line errors of workflow_args that a workflow does not take or cannot use."""

from __future__ import annotations

import asyncio
import random

import pytest

from trinity.rewards.sudoku import is_solved, is_valid, parse_grid, parse_moves, step_reward
from trinity.types import Task
from trinity.workflows.args import WorkflowArgsError
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.sudoku import generate_puzzle

SOLUTION = [
    [5, 3, 4, 6, 7, 8, 9, 1, 2],
    [6, 7, 2, 1, 9, 5, 3, 4, 8],
    [1, 9, 8, 3, 4, 2, 5, 6, 7],
    [8, 5, 9, 7, 6, 1, 4, 2, 3],
    [4, 2, 6, 8, 5, 3, 7, 9, 1],
    [7, 1, 3, 9, 2, 4, 8, 5, 6],
    [9, 6, 1, 5, 3, 7, 2, 8, 4],
    [2, 8, 7, 4, 1, 9, 6, 3, 5],
    [3, 4, 5, 2, 8, 6, 1, 7, 9],
]


def _holes(*cells):
    board = [row[:] for row in SOLUTION]
    for r, c in cells:
        board[r][c] = 0
    return board


def test_board_checks():
    assert is_valid(SOLUTION) and is_solved(SOLUTION)
    assert is_valid(_holes((0, 0))) and not is_solved(_holes((0, 0)))
    row_clash = _holes((0, 0))
    row_clash[0][0] = 3  # 3 is already in row 0
    assert not is_valid(row_clash)
    box_clash = _holes((0, 0), (1, 1))
    box_clash[1][1] = 5  # row 1 and column 1 lack a 5, the top-left box holds one
    assert not is_valid(box_clash)


def test_parse_grid_reads_lists_and_81_character_strings():
    text = "".join(str(v) for row in _holes((0, 0)) for v in row).replace("0", ".", 1)
    assert parse_grid(text, "puzzle") == _holes((0, 0))
    assert parse_grid(SOLUTION, "puzzle") == SOLUTION
    with pytest.raises(ValueError, match="task column 'puzzle'"):
        parse_grid([[1, 2, 3]], "puzzle")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("0 0 5\n1 1 7", [(0, 0, 5), (1, 1, 7)]),
        ("  0 0 5  \n\n", [(0, 0, 5)]),
        ("0 0 5\nthen 1 1 7", None),  # every non-empty line is a move
        ("9 0 5", None),  # rows and columns are 0-8
        ("0 0 0", None),  # values are 1-9
        ("", None),
        ("0 0 1\n0 1 2\n0 2 3", None),  # more than max_moves = 2
    ],
)
def test_parse_moves(reply, expected):
    assert parse_moves(reply, max_moves=2) == expected


def test_step_rewards_for_right_and_wrong_moves():
    board = _holes((0, 0), (0, 1))
    # a right move that leaves a hole: 0; the last one: 1 (solved)
    reward, after = step_reward(board, "0 0 5", max_moves=5)
    assert reward == 0.0 and after == _holes((0, 1)) and board == _holes((0, 0), (0, 1))
    assert step_reward(after, "0 1 3", max_moves=5) == (1.0, SOLUTION)
    assert step_reward(board, "0 0 5\n0 1 3", max_moves=5) == (1.0, SOLUTION)
    # a clash, a filled cell, unreadable text: -1 and the board unchanged
    assert step_reward(board, "0 0 3", max_moves=5) == (-1.0, board)
    assert step_reward(board, "1 1 7", max_moves=5) == (-1.0, board)
    assert step_reward(board, "five in the corner", max_moves=5) == (-1.0, board)


def test_generated_puzzles_have_their_solution():
    puzzle, solution = generate_puzzle(random.Random(3), holes=30)
    assert is_solved(solution) and is_valid(puzzle)
    assert sum(v == 0 for row in puzzle for v in row) == 30
    assert all(puzzle[r][c] in (0, solution[r][c]) for r in range(9) for c in range(9))
    assert generate_puzzle(random.Random(3), holes=30) == (puzzle, solution)


def _workflow(name: str, args: dict, raw: dict | None = None):
    task = Task(raw=raw or {"messages": []}, workflow=name, reward_fn=None, workflow_args=args)
    return WORKFLOWS.get(name)(task, model=None)


@pytest.mark.parametrize(
    ("name", "args", "words"),
    [
        ("sudoku_workflow", {"max_step": 3}, ["workflow_args.max_step", "max_steps"]),
        ("sudoku_workflow", {"max_steps": 0}, ["workflow_args.max_steps", "0", ">= 1"]),
        ("sudoku_workflow", {"holes": "many"}, ["workflow_args.holes", "'many'", "integer"]),
        ("thinking_budget_workflow", {}, ["workflow_args.thinking_token_budget", "required"]),
        (
            "thinking_budget_workflow",
            {"thinking_token_budget": -1},
            ["workflow_args.thinking_token_budget", "-1", ">= 0"],
        ),
        (
            "thinking_budget_workflow",
            {"thinking_token_budget": 4, "reasoning_end_str": ""},
            ["workflow_args.reasoning_end_str", "non-empty"],
        ),
        ("simple_workflow", {"judge_model_name": "x"}, ["workflow_args.judge_model_name", "none"]),
        ("math_eval_workflow", {"temperature": 0.1}, ["workflow_args.temperature", "none"]),
        ("rubric_judge_openai_workflow", {}, ["workflow_args.judge_model_name", "required"]),
        (
            "rubric_judge_openai_workflow",
            {"judge_model_name": "m", "judge_temperature": "hot"},
            ["workflow_args.judge_temperature", "'hot'", "number"],
        ),
    ],
)
def test_bad_workflow_args_fail_in_one_line_naming_the_key(name, args, words):
    with pytest.raises(WorkflowArgsError) as err:
        asyncio.run(_workflow(name, args).run_async())
    message = str(err.value)
    assert "\n" not in message and name in message
    for word in words:
        assert word in message
