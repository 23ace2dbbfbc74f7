"""math-verify bounded in time off the main thread, and its failures raised, not zeroed.

``9^{9^{9^{9}}}`` keeps sympy busy in big-integer C code that holds the GIL: called in
the process (as a runner thread had to, without math-verify's SIGALRM timeout) it froze
everything. In a worker process it costs ``verify_timeout`` seconds and raises.
"""

from __future__ import annotations

import threading
import time

import pytest

from trinity.rewards.format import accuracy_reward
from trinity.rewards.math import math_reward
from trinity.rewards.verifier import MathVerifier, MathVerifyError, VerifyTimeout

PATHOLOGICAL = "\\boxed{9^{9^{9^{9}}}}"


def test_a_pathological_answer_in_a_runner_thread_times_out_and_the_next_is_scored():
    outcome: dict[str, object] = {}

    def score_in_a_thread() -> None:  # as a runner thread does, off the main thread
        try:
            outcome["first"] = math_reward(PATHOLOGICAL, "3", verify_timeout=1)
        except VerifyTimeout as exc:
            outcome["first"] = exc
        outcome["second"] = math_reward("so \\boxed{3}", "3", verify_timeout=1)

    thread = threading.Thread(target=score_in_a_thread, daemon=True)
    thread.start()
    # main thread keeps running meanwhile: the work is not in this process
    ticks = 0
    while thread.is_alive() and ticks < 600:
        time.sleep(0.1)
        ticks += 1
    assert not thread.is_alive()
    assert isinstance(outcome["first"], VerifyTimeout)
    assert "longer than 1s" in str(outcome["first"]) and "9^{9^{9^{9}}}" in str(outcome["first"])
    assert outcome["second"] == {"accuracy": 1.0}  # a new worker replaced the killed one


def test_accuracy_reward_is_bounded_too():
    with pytest.raises(VerifyTimeout):
        accuracy_reward("<answer>9^{9^{9^{9}}}</answer>", "3", verify_timeout=1)


def test_workers_bound_concurrency_and_answer_in_order():
    verifier = MathVerifier(workers=2, timeout_s=30)
    try:
        answers = ["1/2", "0.5", "\\frac{2}{4}", "0.4", "x+1"]
        results: list[bool | None] = [None] * len(answers)

        def ask(i: int) -> None:
            results[i] = verifier.equivalent(answers[i], "0.5")

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(answers))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == [True, True, True, False, False]
        assert len(verifier._workers) <= 2
    finally:
        verifier.close()
    assert all(not w.alive() for w in verifier._workers)


def test_a_worker_that_dies_mid_call_raises_and_is_replaced():
    verifier = MathVerifier(workers=1, timeout_s=60)
    try:
        assert verifier.equivalent("3", "3")
        [worker] = verifier._workers
        failure: list[BaseException] = []

        def stuck() -> None:
            try:
                verifier.equivalent("9^{9^{9^{9}}}", "3")
            except BaseException as exc:  # handed to the test
                failure.append(exc)

        thread = threading.Thread(target=stuck, daemon=True)
        thread.start()
        time.sleep(1.0)  # the request is in the worker by now
        worker.process.kill()
        thread.join(30)
        assert len(failure) == 1 and isinstance(failure[0], MathVerifyError)
        assert "worker exited" in str(failure[0])
        assert verifier.equivalent("\\frac{1}{2}", "0.5")
    finally:
        verifier.close()
