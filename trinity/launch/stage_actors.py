"""Actors that one stage of a run hands on to the next, instead of each stage starting its own.

A stage's actors (synchronizer, experience buffer, explorer, a one-rank trainer) each
live in a Ray worker process that imports torch, transformers and the run's plugins
before it builds anything: several seconds per process on a small machine, paid again
by every stage. When another stage follows, a stage keeps these processes: each actor
drops what its role built (:meth:`Reusable.retire`) and the next stage builds its role
in the same process (:meth:`Reusable.restart`, the constructor with the new stage's
arguments). An actor is handed on only to a stage that would start it with the same
Ray options (name, resources, runtime environment); the others are killed at the end of
their stage as before. A kept actor the next stage does not take is killed once that
stage has started its actors (an idle process holds its imports, a few hundred MB), and
every kept actor when the run ends or fails.

Not handed on: the trainer's ranks of a data-parallel group (they leave their process
group at the end of the stage) and a trainer that serves an NCCL weight group.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import Any


class Reusable:
    """A role that can be rebuilt in its actor's process for the next stage."""

    def retire(self) -> None:
        """Drop everything this role built, so an idle actor holds no model or buffer
        while other stages run; the next call is :meth:`restart` or none."""
        self.__dict__.clear()
        gc.collect()
        from trinity.utils.memory import release_free_memory

        release_free_memory()

    retire.ignores_start_error = True  # type: ignore[attr-defined]

    def restart(self, *args: Any, **kwargs: Any) -> None:
        """Build the role again, as a new actor's constructor would with these arguments
        (through ``deferred_start_errors``'s constructor where the class is wrapped)."""
        type(self).__init__(self, *args, **kwargs)

    restart.ignores_start_error = True  # type: ignore[attr-defined]


def reusable(cls: type) -> type:
    """A subclass of ``cls`` with :class:`Reusable`'s methods; it keeps ``cls``'s name."""
    return type(cls.__name__, (cls, Reusable), {"__doc__": cls.__doc__})


class StageActors:
    """The actors kept between the stages of one run, by the options that started them.

    A key is a tuple whose second item, when it has one, is the actor's Ray name."""

    def __init__(self) -> None:
        self._idle: dict[tuple, Any] = {}

    def start(self, key: tuple, create: Callable[[], Any], *args: Any) -> tuple[Any, Any]:
        """A kept actor for ``key`` rebuilt with ``args``, or ``create()`` started with
        them; returns ``(actor, ref)``, where ``ref`` is the rebuild's ray ref (None for a
        new actor). Wait for the ref before calling the actor: its calls may run
        concurrently. A kept actor of another key holding the same name is stopped first."""
        actor = self._idle.pop(key, None)
        if actor is not None:
            return actor, actor.restart.remote(*args)
        name = key[1] if len(key) > 1 else None
        clashing = [k for k in self._idle if name is not None and len(k) > 1 and k[1] == name]
        if clashing:
            self._kill(clashing)
            wait_until_released([name])
        return create().remote(*args), None

    def keep(self, key: tuple, actor: Any) -> Any:
        """Retire ``actor``'s role and keep it for a later stage; returns the retire ref."""
        self._idle[key] = actor
        return actor.retire.remote()

    def kill_all(self) -> None:
        """Stop every kept actor no stage has taken (the stage that follows has started
        its own, or the run ends)."""
        self._kill(list(self._idle))

    def _kill(self, keys: list[tuple]) -> None:
        import ray

        for key in keys:
            ray.kill(self._idle.pop(key))


def stop_actors(
    actors: list[Any], names: list[str], release: Callable[[], list[str]] | None = None
) -> None:
    """After a failure: kill each of ``actors``, call ``release`` (which frees what holds
    them, e.g. a placement group, and returns more actor names) and wait until ``names``
    are free. An error on the way is logged, not raised: every actor still gets its kill,
    and the failure that ended the stage stays the one raised."""
    import ray

    log = logging.getLogger("trinity.launch")
    for actor in actors:
        try:
            ray.kill(actor)
        except Exception as exc:
            log.warning("could not kill an actor of the failed stage: %s", exc)
    try:
        wait_until_released(names + (release() if release is not None else []))
    except Exception as exc:
        log.warning("could not release the failed stage's actors: %s", exc)


def wait_until_released(names: list[str], timeout: float = 10.0) -> None:
    """Until no live actor holds any of the Ray ``names`` (a killed actor lets its name go
    soon after), at most ``timeout`` seconds in all; empty names are skipped."""
    import time

    import ray

    deadline = time.monotonic() + timeout
    for name in filter(None, names):
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name)
            except ValueError:
                break
            time.sleep(0.05)
