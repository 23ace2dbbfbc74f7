import threading

import pytest
import torch

from trinity.utils.threads import on_torch_thread, torch_thread_method


def test_every_call_runs_on_one_thread_whoever_calls():
    seen = []
    callers = [
        threading.Thread(target=lambda: seen.append(on_torch_thread(threading.get_ident)))
        for _ in range(3)
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    seen.append(on_torch_thread(threading.get_ident))
    assert len(set(seen)) == 1 and seen[0] != threading.get_ident()
    # a call from the torch thread itself runs directly (no deadlock)
    assert on_torch_thread(lambda: on_torch_thread(threading.get_ident)) == seen[0]


def test_results_and_errors_reach_the_caller():
    class Role:
        @torch_thread_method
        def step(self, x: torch.Tensor, scale: float = 1.0) -> tuple[torch.Tensor, int]:
            return x * scale, threading.get_ident()

    out, ident = Role().step(torch.ones(3), scale=2.0)
    assert torch.equal(out, torch.full((3,), 2.0))
    assert ident == on_torch_thread(threading.get_ident)
    with pytest.raises(ZeroDivisionError):
        on_torch_thread(lambda: 1 / 0)
