"""How the run's actors start: threads, plugins and log file, and start errors reported as such.

:func:`start_actor` is what every actor of a run does first.

The explorer and trainer roles run as Ray actors with ``max_concurrency > 1`` (a call
such as a status query can arrive while ``run`` is busy). When the constructor of such
an actor raises (a taskset it cannot read, a missing model file), Ray 2.x reports the
error and then aborts the worker process while tearing it down, which prints a C++
stack trace and "Fatal Python error: Aborted" after the real message. An actor with the
default concurrency of one does not abort.

:func:`deferred_start_errors` wraps a role class so that its constructor keeps the
exception instead of raising it, and every public method raises it: the actor starts,
the driver's first call (``run``, ``setup``) fails with the original exception and
traceback, and the run stops the actors as after any failed step. Methods marked
``ignores_start_error`` (a reused actor's ``retire`` and ``restart``) are not guarded.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trinity.config import Config
from trinity.launch.plugins import load_external_libs, load_plugins
from trinity.utils.log import get_actor_logger


def start_actor(config: Config, job_dir: Path, name: str, plugin_dirs: Sequence[str]):
    """What every actor of a run does first: torch threads, the run's plugins and
    ``external_lib`` modules, and its log file ``log/<name>.log``; returns the logger."""
    import torch

    # Ray sets OMP_NUM_THREADS=1 for fractional-CPU actors; the roles alternate in
    # synchronous mode, so each may use every core while it works
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    load_plugins(plugin_dirs)
    load_external_libs(config.trainer)
    return get_actor_logger(
        name,
        job_dir / "log",
        level=config.log.level,
        group_by_node=config.log.group_by_node,
        capture_library_logs=True,
    )


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._start_error is not None:
            raise self._start_error
        return method(self, *args, **kwargs)

    return call


def deferred_start_errors(cls: type) -> type:
    """A subclass of ``cls`` whose ``__init__`` keeps an exception for the public methods
    (those not starting with ``_``) to raise; the subclass keeps ``cls``'s name."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        self._start_error = None
        try:
            cls.__init__(self, *args, **kwargs)
        except Exception as exc:  # not KeyboardInterrupt / SystemExit
            self._start_error = exc

    namespace: dict[str, Any] = {"__init__": __init__, "__doc__": cls.__doc__}
    for klass in reversed(cls.__mro__[:-1]):  # inherited public methods too, not object's
        for name, member in vars(klass).items():
            if not name.startswith("_") and callable(member) and not isinstance(member, type):
                # (a reused actor's retire and restart: stage_actors.py)
                if not getattr(member, "ignores_start_error", False):
                    namespace[name] = _guarded(member)
    return type(cls.__name__, (cls,), namespace)
