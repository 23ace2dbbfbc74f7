"""Helpers of the tests that run ``trinity`` or Ray nodes in processes of their own.

``run_cli`` runs ``python -m trinity ...`` from the repository root. ``ray_nodes`` starts
``ray start --block`` processes (a head, then nodes joining it) and stops them on exit:
each gets SIGTERM alone, so it drains its node while the head's GCS still answers and
then stops its own processes; signalling a whole node's process group at once kills the
GCS first, and the drain then waits 30 s for a GCS that is gone.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "arithmetic" / "grpo.yaml"
RAY = str(Path(sys.executable).with_name("ray"))


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: int = 600
) -> subprocess.CompletedProcess:
    """``python -m trinity *args`` in the environment ``env`` (default: this one's)."""
    return subprocess.run(
        [sys.executable, "-m", "trinity", *args],
        cwd=REPO,
        env=dict(os.environ) if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_demo(
    model_dir: Path,
    root: Path,
    *overrides: str,
    plugin_dir: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``trinity run`` of the demo config with the model ``model_dir``, its job directory
    under ``root``, and ``overrides``."""
    plugins = ["--plugin-dir", str(plugin_dir)] if plugin_dir is not None else []
    return run_cli(
        "run",
        "--config",
        str(DEMO),
        *plugins,
        f"model.model_path={model_dir}",
        f"checkpoint_root_dir={root}",
        *overrides,
        env=env,
    )


# A plugin advantage function: every valid token gets the same advantage ``value``.
CONSTANT_ADVANTAGE = textwrap.dedent(
    """
    from dataclasses import dataclass

    from trinity.algorithm.advantage.base import AdvantageFn
    from trinity.algorithm.registries import ADVANTAGE_FN


    @ADVANTAGE_FN.register("constant_advantage_{tag}")
    class ConstantAdvantage(AdvantageFn):
        @dataclass
        class Args:
            value: float = 1.0

        def compute(self, inputs):
            advantages = self.args.value * inputs.mask
            return advantages, advantages.clone()
    """
)


def write_plugin(directory: Path, tag: str) -> Path:
    """A plugin directory registering the advantage function ``constant_advantage_<tag>``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"constant_advantage_{tag}.py").write_text(
        CONSTANT_ADVANTAGE.replace("{tag}", tag)
    )
    return directory


def free_port() -> int:
    """A port nobody listens on right now: for an address meant to lead nowhere. Never
    one for a server to bind later (another process may take it in between): let the
    server bind port 0 and say which port it got, as :func:`start_ray_head` does."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ray_environment(**extra: str) -> dict[str, str]:
    """This environment without ``RAY_ADDRESS`` (a node must not look for another cluster)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, **extra}


def stop_ray_node(proc: subprocess.Popen, timeout: float = 60) -> None:
    """Stop one ``ray start --block`` process and whatever of its node outlives it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its session: the node's Ray processes
    except ProcessLookupError:
        pass


@contextmanager
def ray_nodes(
    env: dict[str, str], cwd: Path | None = None
) -> Iterator[Callable[..., subprocess.Popen]]:
    """Yields ``start(*args)``, which runs ``ray start --block *args`` in a session of its
    own, in directory ``cwd`` (default: this process's), where its workers start too; the
    nodes started stop in reverse order on exit (the head last)."""
    procs: list[subprocess.Popen] = []

    def start(*args: str, output: IO[str] | None = None) -> subprocess.Popen:
        command = [RAY, "start", "--block", "--disable-usage-stats", *args]
        procs.append(
            subprocess.Popen(
                command,
                env={**env, "PYTHONUNBUFFERED": "1"},
                cwd=cwd,
                stdout=output or subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        return procs[-1]

    try:
        yield start
    finally:
        for proc in reversed(procs):
            stop_ray_node(proc)


def start_ray_head(
    start: Callable[..., subprocess.Popen], *args: str, timeout: float = 120
) -> tuple[subprocess.Popen, str]:
    """``ray start --head --port 0 *args`` through ``start`` (of :func:`ray_nodes`): the
    head's GCS binds a port of its choosing, so no other process can take it between
    the choice and the bind; returns the head and its address (127.0.0.1:<port>), read
    from what ``ray start`` prints."""
    with tempfile.TemporaryFile("w+") as output:
        head = start("--head", "--port", "0", *args, output=output)
        deadline = time.monotonic() + timeout
        while not (match := re.search(r"--address='[^']*:(\d+)'", _read(output))):
            assert head.poll() is None, f"ray start --head exited: {_read(output)[-2000:]}"
            assert time.monotonic() < deadline, f"no head address in {timeout:.0f} s"
            time.sleep(0.5)
    return head, f"127.0.0.1:{match[1]}"


def _read(output: IO[str]) -> str:
    output.seek(0)
    return output.read()


def port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def wait_until(predicate, procs: Sequence[subprocess.Popen], what: str, timeout: float) -> None:
    """Poll ``predicate`` until it holds; fail at once if one of ``procs`` exited."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert all(p.poll() is None for p in procs), f"a ray start exited before {what}"
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout:.0f} s"
        time.sleep(0.5)
