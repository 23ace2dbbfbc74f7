"""Sudoku checking: boards, moves and the reward of one step of ``sudoku_workflow``.

A board is 9 rows of 9 integers, 0 for an empty cell. It is valid when no row, column
or 3x3 box holds a digit twice, and solved when it is full and valid (so a puzzle with
several solutions accepts each). A reply is one move per line, ``row col value``
(rows and columns 0-8, values 1-9).

    >>> parse_moves("0 2 4\\n1 3 5", max_moves=5)
    [(0, 2, 4), (1, 3, 5)]
"""

from __future__ import annotations

from typing import Any

Board = list[list[int]]


def parse_grid(value: Any, column: str) -> Board:
    """A 9x9 board from a list of 9 lists of 9 integers, or an 81-character string of
    digits (``0`` or ``.`` for an empty cell); ``column`` names the task column in errors."""
    if isinstance(value, str) and len(value.strip()) == 81:
        cells = [0 if ch in "0." else int(ch) if ch in "123456789" else -1 for ch in value.strip()]
        board = [cells[i : i + 9] for i in range(0, 81, 9)]
    elif isinstance(value, list) and all(isinstance(row, list) for row in value):
        board = [list(row) for row in value]
    else:
        board = []
    shaped = len(board) == 9 and all(len(row) == 9 for row in board)
    if not shaped or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 9 for row in board for v in row
    ):
        raise ValueError(
            f"task column '{column}' must be a 9x9 Sudoku board (9 lists of 9 integers 0-9, "
            f"0 empty, or 81 digits with 0 or . empty), got {value!r}"
        )
    return board


def _units(board: Board) -> list[list[int]]:
    rows = [list(row) for row in board]
    columns = [[board[r][c] for r in range(9)] for c in range(9)]
    boxes = [
        [board[r][c] for r in range(br, br + 3) for c in range(bc, bc + 3)]
        for br in range(0, 9, 3)
        for bc in range(0, 9, 3)
    ]
    return rows + columns + boxes


def is_valid(board: Board) -> bool:
    """No digit twice in any row, column or 3x3 box (empty cells aside)."""
    for unit in _units(board):
        digits = [v for v in unit if v]
        if len(digits) != len(set(digits)):
            return False
    return True


def is_solved(board: Board) -> bool:
    """Every cell filled and the board valid."""
    return all(all(row) for row in board) and is_valid(board)


def parse_moves(text: str, max_moves: int) -> list[tuple[int, int, int]] | None:
    """The moves of a reply, one ``row col value`` per non-empty line; None when a line
    is anything else, a number is out of range, or there are none or over ``max_moves``."""
    moves = []
    for line in text.strip().splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
            return None
        r, c, v = (int(p) for p in parts)
        if r > 8 or c > 8 or not 1 <= v <= 9:
            return None
        moves.append((r, c, v))
    return moves if 0 < len(moves) <= max_moves else None


def step_reward(board: Board, reply: str, max_moves: int) -> tuple[float, Board]:
    """The reward of one reply to ``board`` and the board after it: -1 (and ``board``
    unchanged) for an unreadable reply, a move onto a filled cell or a clash; 1 when the
    moves solve the puzzle; else 0 (the game goes on)."""
    moves = parse_moves(reply, max_moves)
    if moves is None:
        return -1.0, board
    after = [row[:] for row in board]
    for r, c, v in moves:
        if after[r][c]:
            return -1.0, board
        after[r][c] = v
    if not is_valid(after):
        return -1.0, board
    return (1.0 if is_solved(after) else 0.0), after
