"""The command line of a benchmark that runs another command and measures it
(``script.py [options] -- COMMAND ...``)."""

from __future__ import annotations

import argparse


def parse_wrapped(parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, list[str]]:
    """``parser``'s options and the command given after ``--`` (an error without one)."""
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args()
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not argv:
        parser.error("give the command to measure after --")
    return args, argv
