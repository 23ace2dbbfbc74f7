"""``trinity view``: browse the experiences of a run.

    trinity view --db checkpoints/proj/run/buffer/experience.db          # web page on 127.0.0.1:8765
    trinity view --db buffer.db --port 0 --tokenizer MODEL_DIR          # any free port; token texts
    trinity view --db exps.jsonl --print --offset 40 --limit 10 | less  # plain text

``--db`` takes a SQLite file, a SQLAlchemy URL (PostgreSQL works), a JSON-lines file
of experiences, or a directory holding one of those (a job directory is searched in
its ``buffer/``). Each experience shows its prompt, response, reward, model_version and
the log-probability of every response token. A row that is not a stored experience (a
line of bad JSON, a row another tool wrote) is shown in its place as a one-line notice.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the viewer pulls in torch; `trinity --help` should not
    from trinity.view.records import ExperienceSource

DEFAULT_PORT = 8765
_DATA_EXTENSIONS = (".db", ".sqlite", ".sqlite3", ".jsonl")


def add_view_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``view`` sub-command on ``subparsers`` (from ``add_subparsers``)."""
    view = subparsers.add_parser(
        "view",
        help="browse a run's experiences (web page, or text with --print)",
        description="Show the experiences stored by a run: prompt, response, reward, "
        "model_version and per-token log-probabilities. Serves a web page on 127.0.0.1 "
        "unless --print is given.",
    )
    view.add_argument(
        "--db",
        required=True,
        metavar="PATH",
        help="SQLite file, SQLAlchemy URL, .jsonl file, or a directory holding one",
    )
    view.add_argument("--table", default="experience", help="experience table of a database")
    view.add_argument("--limit", type=int, default=20, help="experiences per page")
    view.add_argument("--offset", type=int, default=0, help="index of the first experience shown")
    view.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR",
        help="local tokenizer (model directory) to show token texts instead of ids",
    )
    view.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="port on 127.0.0.1 (0: any free port)"
    )
    view.add_argument(
        "--print",
        dest="print_only",
        action="store_true",
        help="write one page as text to stdout instead of serving the web page",
    )
    view.set_defaults(func=run_view)
    return view


def run_view(args: argparse.Namespace) -> int:
    from trinity.view.records import ExperienceSource, ViewSourceError, tokenizer_decoder

    if args.limit < 1 or args.offset < 0:
        print("trinity view: need --limit >= 1 and --offset >= 0", file=sys.stderr)
        return 2
    try:
        path = find_source(args.db)
        decode = tokenizer_decoder(args.tokenizer) if args.tokenizer else None
        source = ExperienceSource(path, table=args.table, decode=decode)
    except (ViewSourceError, OSError) as exc:
        print(f"trinity view: {exc}", file=sys.stderr)
        return 1
    try:
        if args.print_only:
            from trinity.view.render import page_text

            sys.stdout.write(page_text(source.page(args.offset, args.limit), source.count(), path))
            return 0
        return _serve(source, args)
    except ViewSourceError as exc:  # a database that cannot be read past its first look
        print(f"trinity view: {exc}", file=sys.stderr)
        return 1
    finally:
        source.close()


def _serve(source: ExperienceSource, args: argparse.Namespace) -> int:
    from trinity.view.server import bind, create_app, serve

    app = create_app(source, default_limit=args.limit)
    try:
        sock = bind(args.port)
    except OSError as exc:
        print(
            f"trinity view: cannot listen on 127.0.0.1:{args.port} ({exc}); try --port 0",
            file=sys.stderr,
        )
        return 1
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/?offset={args.offset}&limit={args.limit}"
    print(f"trinity view: {source.count()} experiences from {source.path}", flush=True)
    print(f"trinity view: open {url} (Ctrl-C stops)", flush=True)
    # Ctrl-C and SIGTERM both end with status 0, even when the parent started this
    # process with SIGINT ignored (as shells do for background jobs): uvicorn raises the
    # signal it stopped on again once it is done, and these handlers turn it into
    # KeyboardInterrupt.
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        serve(app, sock)
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def find_source(path: str) -> str:
    """``path`` itself, or the one data file in a directory (or its ``buffer/``)."""
    from trinity.view.records import ViewSourceError

    if "://" in path or not os.path.isdir(path):
        return path
    found: list[str] = []
    for folder in (path, os.path.join(path, "buffer")):
        if os.path.isdir(folder):
            found += sorted(
                os.path.join(folder, name)
                for name in os.listdir(folder)
                if name.endswith(_DATA_EXTENSIONS)
            )
    if len(found) == 1:
        return found[0]
    if not found:
        raise ViewSourceError(
            f"no experience database or .jsonl file in '{path}' or '{os.path.join(path, 'buffer')}'"
        )
    raise ViewSourceError(f"several experience files in '{path}'; pick one with --db: {found}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trinity")
    add_view_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
