"""Exact evaluation of arithmetic expressions written by a model, without ``eval``.

The text is parsed with :mod:`ast` and only integer literals, ``+ - * /`` and
parentheses are accepted; values are :class:`fractions.Fraction`, so ``6 / 4 * 2`` is
exactly 3. Anything else (names, calls, powers, floats, very long input) is rejected
with :class:`ExpressionError`, so a policy's text can never run code.

    >>> evaluate("(8 - 2) * 4")
    Expression(value=Fraction(24, 1), numbers=[8, 2, 4])
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from fractions import Fraction

MAX_LENGTH = 200  # characters; a longer "answer" is not a countdown expression
MAX_NUMBER = 10**12  # bigger literals are rejected (keeps products bounded)

_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


class ExpressionError(ValueError):
    """The text is not an arithmetic expression this module evaluates."""


@dataclass
class Expression:
    value: Fraction
    numbers: list[int]  # the integer literals, in reading order


def evaluate(text: str, *, allow_negation: bool = False) -> Expression:
    """Parse and evaluate ``text``; raises :class:`ExpressionError` on anything else.

    ``allow_negation`` accepts a unary minus (``-3 + 5``); countdown rules do not.
    """
    text = text.strip()
    if not text:
        raise ExpressionError("empty expression")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not an arithmetic expression: {text!r}") from exc
    numbers: list[int] = []
    value = _eval(tree.body, numbers, allow_negation)
    return Expression(value, numbers)


def _eval(node: ast.AST, numbers: list[int], allow_negation: bool) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        if node.value > MAX_NUMBER:
            raise ExpressionError(f"number {node.value} is too large")
        numbers.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left = _eval(node.left, numbers, allow_negation)
        right = _eval(node.right, numbers, allow_negation)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ExpressionError("division by zero")
        return _OPS[type(node.op)](left, right)
    if allow_negation and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, numbers, allow_negation)
    allowed = "integers, + - * / and parentheses" + (", unary -" if allow_negation else "")
    raise ExpressionError(f"'{ast.unparse(node)}' is not allowed (only {allowed})")
