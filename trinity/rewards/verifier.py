"""math-verify in worker processes, every call bounded in time.

math-verify bounds its own parsing and verification with ``SIGALRM``, which only works in
a process's main thread; workflows score their rollouts in runner threads, where it has to
run without a bound. One pathological answer (``9^{9^{9^{9}}}``) then keeps sympy busy
for hours, in big-integer C code that holds the GIL and freezes the whole explorer. So
:class:`MathVerifier` parses and verifies in a few worker processes: a call that does not
answer within its timeout kills its worker (the next call starts a new one) and raises
:class:`VerifyTimeout`. At most ``workers`` calls run at once; the others wait for a
free worker. An error inside math-verify comes back as :class:`MathVerifyError` with the
worker's traceback.

A worker is a fresh interpreter that loads this file alone (not the ``trinity`` package,
so no torch) and imports math-verify once; requests and answers are JSON lines on its
stdin and stdout, and it exits when its stdin closes. A call on a normal answer costs
the pipe round trip on top of math-verify's own work (``benchmarks/math_verify_worker.py``
prints both).

    >>> MathVerifier().equivalent("\\\\frac{1}{2}", "0.5")
    True
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time

STARTUP_TIMEOUT_S = 120.0  # a worker's interpreter start and math-verify import
DEFAULT_TIMEOUT_S = 5.0  # math-verify's own default bound


class VerifyTimeout(TimeoutError):
    """math-verify did not parse and verify an answer within the timeout."""


class MathVerifyError(RuntimeError):
    """math-verify raised, or its worker process failed."""


class _Worker:
    """One worker process and its pipes."""

    def __init__(self) -> None:
        loader = (
            "import importlib.util as u; "
            f"s = u.spec_from_file_location('trinity_math_verify_worker', {__file__!r}); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); m.serve()"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", loader],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            self._read(STARTUP_TIMEOUT_S, "starting math-verify worker")
        except BaseException:
            self.kill()
            raise

    def ask(self, answer: str, reference: str, timeout_s: float) -> bool:
        request = json.dumps({"answer": answer, "reference": reference}) + "\n"
        self.process.stdin.write(request.encode())
        self.process.stdin.flush()
        reply = self._read(timeout_s, f"verifying answer {_short(answer)} against {reference!r}")
        if "error" in reply:
            raise MathVerifyError(
                f"math-verify raised on answer {_short(answer)} (reference {reference!r}); "
                f"traceback in its worker:\n{reply['error']}"
            )
        return bool(reply["equal"])

    def _read(self, timeout_s: float, doing: str) -> dict:
        stdout = self.process.stdout
        deadline = time.monotonic() + timeout_s
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            # stdout is read at the descriptor (never through its buffer), one reply at a time
            ready, _, _ = select.select([stdout], [], [], max(left, 0))
            if not ready:
                raise VerifyTimeout(f"math-verify took longer than {timeout_s:g}s {doing}")
            chunk = os.read(stdout.fileno(), 1 << 16)
            if not chunk:
                raise MathVerifyError(
                    f"math-verify worker exited (code {self.process.poll()}) while {doing}"
                )
            line += chunk
        return json.loads(line)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            pipe.close()

    def alive(self) -> bool:
        return self.process.poll() is None


class MathVerifier:
    """Is an answer mathematically equal to a reference? Asked of math-verify in up to
    ``workers`` worker processes (started on first use), each call bounded by
    ``timeout_s`` seconds."""

    def __init__(self, workers: int = 2, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.timeout_s = timeout_s
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        for _ in range(workers):
            self._idle.put(None)  # started when a call first needs it
        self._workers: list[_Worker] = []  # every worker started, for close()
        self._lock = threading.Lock()

    def equivalent(self, answer: str, reference: str, timeout_s: float | None = None) -> bool:
        """True when ``answer`` equals ``reference`` by math-verify (each is parsed as
        ``$...$``). Raises :class:`VerifyTimeout` or :class:`MathVerifyError`."""
        worker = self._idle.get()
        try:
            if worker is None or not worker.alive():
                worker = _Worker()
                with self._lock:
                    self._workers.append(worker)
            return worker.ask(answer, reference, timeout_s or self.timeout_s)
        except (VerifyTimeout, MathVerifyError, OSError):
            if worker is not None:
                worker.kill()  # stuck, dead or out of step with us: never reused
                worker = None
            raise
        finally:
            self._idle.put(worker)

    def close(self) -> None:
        """Stop every worker (a later call starts new ones)."""
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            if worker.alive():
                worker.kill()


_default: MathVerifier | None = None
_default_lock = threading.Lock()


def default_verifier() -> MathVerifier:
    """The process's shared verifier, made on first use; its workers stop at exit."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MathVerifier()
            atexit.register(_default.close)
        return _default


def _short(text: str, limit: int = 200) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def serve() -> None:
    """A worker's loop: one JSON request per stdin line, one JSON reply per stdout line."""
    import logging
    import traceback

    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed must not break the replies
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" warnings
    from math_verify import parse, verify

    def equal(answer: str, reference: str) -> bool:
        gold = parse(f"${reference}$", parsing_timeout=None, raise_on_error=True)
        predicted = parse(f"${answer}$", parsing_timeout=None, raise_on_error=True)
        return bool(gold and predicted) and bool(
            verify(gold, predicted, timeout_seconds=None, raise_on_error=True)
        )

    # math-verify's first calls build its parsers (up to a second each): done before
    # "ready", so they never count against a call's timeout
    for answer, reference in _WARM_UP:
        equal(answer, reference)
    out.write(b'{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            reply = {"equal": equal(request["answer"], request["reference"])}
        except Exception:
            reply = {"error": traceback.format_exc()}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


_WARM_UP = [  # (answer, reference): numbers, LaTeX, expressions, text, intervals
    ("27", "27"),
    ("\\frac{1}{2}", "0.5"),
    ("x + 1", "1 + x"),
    ("\\sqrt{2}", "1.41421356"),
    ("hello world", "3"),
    ("(1, 2]", "(1, 2]"),
    ("x = 3", "3"),
]
