"""Decode steps captured once per bucket key and replayed: CUDA graphs on a GPU, the
plain function on the CPU.

A capture function turns a step (a function of static tensors, no arguments, no host
reads) into a replay function. :class:`StepGraphs` calls it once per key (the bucket of
rows and columns and the sampler's static options) and counts the captures, so a test
on the CPU checks with a counting capture function that a key is never captured twice;
:func:`cuda_graph_capture` is the GPU's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable

import torch

Step = Callable[[], None]
Capture = Callable[[Step], Step]

_WARMUP_STEPS = 2  # uncaptured runs first: cuBLAS and SDPA pick their kernels on them


def eager(step: Step) -> Step:
    """The CPU's capture: the step itself, run as it is at every replay."""
    return step


def graphs_enabled() -> bool:
    """Whether CUDA steps are captured: yes unless ``TRINITY_DECODE_GRAPHS=0`` (then they
    run eagerly, the same tensors and results, to tell a capture problem from others)."""
    return os.environ.get("TRINITY_DECODE_GRAPHS", "1").lower() not in ("0", "false", "no", "off")


def cuda_graph_capture() -> Capture:
    """Capture steps as CUDA graphs sharing one memory pool (a step's temporaries are
    dead between replays, so the graphs of all buckets can share them)."""
    pool = torch.cuda.graph_pool_handle()

    def capture(step: Step) -> Step:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(_WARMUP_STEPS):
                step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # thread_local: other threads of the process (a trainer, workflow runners) may
        # use CUDA while the engine's thread captures
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            step()
        return graph.replay

    return capture


class StepGraphs:
    """Replay functions by key, each captured on first use.

    Args:
        capture: makes a replay function of a step; it may run the step (warm-up), so
            ``save`` / ``restore`` bracket it and the state the step changes is put back.
        save: returns a copy of that state; restore: writes such a copy back.
    """

    def __init__(
        self,
        capture: Capture,
        save: Callable[[], object],
        restore: Callable[[object], None],
    ) -> None:
        self.capture = capture
        self._save, self._restore = save, restore
        self.captures = 0  # capture calls so far: once per key while the cache lives
        self._replays: dict[Hashable, Step] = {}

    def run(self, key: Hashable, step: Step) -> None:
        """Run ``step`` (its replay for ``key``; captured now if it is the first)."""
        replay = self._replays.get(key)
        if replay is None:
            saved = self._save()
            replay = self._replays[key] = self.capture(step)
            self._restore(saved)
            self.captures += 1
        replay()

    def clear(self) -> None:
        """Forget every captured step (the tensors they read were reallocated)."""
        self._replays.clear()
