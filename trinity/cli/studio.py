"""``trinity studio``: the config generator in the browser.

    trinity studio --port 8080                  # http://127.0.0.1:8080
    trinity studio --port 8080 --host 0.0.0.0   # reachable from other machines

Replaces this process with ``streamlit run trinity/studio/app.py`` (Streamlit is the
optional ``studio`` extra), so Ctrl-C and signals reach the server directly. The server
binds 127.0.0.1 unless ``--host`` says otherwise: the page has no login, so reaching it
from the network is a choice, not a default.

Streamlit's own checks are on, named on the command line so that no Streamlit config
file turns them off: ``server.enableCORS`` (the app's websocket opens only from the
page's own origin), ``server.enableXsrfProtection`` (an upload needs the session's
token) and, on a loopback address, ``server.allowedHosts`` (the websocket opens only for
a Host header naming localhost, 127.0.0.1 or [::1], so a page that rebinds its own name
to 127.0.0.1 cannot drive the app; with a Streamlit release that lacks the option,
before 1.61, the command leaves it out and says so).
Streamlit still serves its static page and ``/_stcore/health`` to any Host; the form and
its values travel only over the websocket.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import trinity.studio
from trinity.utils.hosts import allowed_hosts

APP = Path(trinity.studio.__file__).with_name("app.py")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def studio_command(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> list[str]:
    """The ``streamlit run`` command line of the Studio."""
    hosts = allowed_hosts(host)
    host_check: list[str] = []
    if hosts is not None and streamlit_knows("server.allowedHosts"):
        for name in hosts:
            host_check += ["--server.allowedHosts", name]
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        "--global.developmentMode",
        "false",
        "--client.toolbarMode",
        "minimal",
        "--server.enableCORS",
        "true",
        "--server.enableXsrfProtection",
        "true",
        *host_check,
    ]


def streamlit_knows(option: str) -> bool:
    """Whether the installed Streamlit has config ``option`` (read from its source:
    importing Streamlit takes seconds, and ``streamlit run`` refuses an unknown flag)."""
    spec = importlib.util.find_spec("streamlit")
    if spec is None or spec.origin is None:
        return False
    config = Path(spec.origin).with_name("config.py")
    return config.is_file() and f'"{option}"' in config.read_text(encoding="utf-8")


def _cmd_studio(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("streamlit") is None:
        print(
            "trinity: studio needs Streamlit: run `pip install 'trinity-rft[studio]'` "
            "(or `pip install streamlit`)",
            file=sys.stderr,
        )
        return 1
    print(
        f"[trinity] Trinity Studio on http://{args.host}:{args.port} (Ctrl-C stops it)",
        file=sys.stderr,
        flush=True,
    )
    if allowed_hosts(args.host) is not None and not streamlit_knows("server.allowedHosts"):
        print(
            "[trinity] this Streamlit has no server.allowedHosts, so the Studio's websocket "
            "does not check the Host header: upgrade Streamlit (1.61 or later) for that check",
            file=sys.stderr,
            flush=True,
        )
    command = studio_command(args.host, args.port)
    os.execv(command[0], command)
    return 0  # not reached: execv does not return


def add_studio_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``trinity studio`` on the ``trinity`` command's subparsers."""
    parser = subparsers.add_parser(
        "studio",
        help="open the config generator (Trinity Studio) in the browser",
        description="Serve Trinity Studio, a form that writes config files for `trinity run` "
        "(beginner and expert modes, every key with its help text, checks as `trinity run` does).",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="port to serve on (default: %(default)s)"
    )
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help="address to bind (default: %(default)s, this machine only; 0.0.0.0 for every interface)",
    )
    parser.set_defaults(func=_cmd_studio)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m trinity.cli.studio``: the same command without the ``trinity`` wrapper."""
    parser = argparse.ArgumentParser(prog="trinity")
    add_studio_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["studio", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
