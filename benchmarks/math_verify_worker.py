"""What bounding math-verify in worker processes costs per call on normal answers.

Times parse + verify of a few ordinary answers in this process (math-verify without a
timeout, as a runner thread would have to call it) and through
:class:`trinity.rewards.verifier.MathVerifier` (a worker process, with a timeout), after
a warm-up round, and the worker's start. Prints milliseconds per call.

    .venv/bin/python benchmarks/math_verify_worker.py
"""

from __future__ import annotations

import logging
import statistics
import time

from trinity.rewards.verifier import MathVerifier

PAIRS = [  # (answer, reference)
    ("27", "27"),
    ("26", "27"),
    ("\\frac{1}{2}", "0.5"),
    ("x + 1", "1 + x"),
    ("\\sqrt{2}", "1.41421356"),
    ("3.0", "3"),
    ("-4", "4"),
    ("(1, 2)", "(1, 2)"),
]
ROUNDS = 30


def in_process(answer: str, reference: str) -> bool:
    from math_verify import parse, verify

    gold = parse(f"${reference}$", parsing_timeout=None)
    predicted = parse(f"${answer}$", parsing_timeout=None)
    return bool(gold and predicted and verify(gold, predicted, timeout_seconds=None))


def per_call_ms(fn) -> float:
    for answer, reference in PAIRS:  # warm-up: math-verify's first calls compile regexes
        fn(answer, reference)
    times = []
    for _ in range(ROUNDS):
        for answer, reference in PAIRS:
            start = time.perf_counter()
            fn(answer, reference)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    verifier = MathVerifier(workers=1)
    start = time.perf_counter()
    verifier.equivalent("1", "1")
    print(f"worker start (interpreter + math-verify import): {time.perf_counter() - start:.2f} s")
    local = per_call_ms(in_process)
    worker = per_call_ms(verifier.equivalent)
    print(f"in process:     {local:.3f} ms per call (median over {ROUNDS * len(PAIRS)})")
    print(f"worker process: {worker:.3f} ms per call ({worker - local:+.3f} ms)")
    verifier.close()


if __name__ == "__main__":
    main()
