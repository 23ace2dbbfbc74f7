"""Reusable roles: a kept actor's role is dropped at the end of a stage and rebuilt, with
the next stage's arguments, in the same object (the same process under Ray)."""

from __future__ import annotations

import pytest

from trinity.launch.actor_start import deferred_start_errors
from trinity.launch.stage_actors import StageActors, reusable


class Role:
    """A role whose constructor fails on request."""

    built = 0

    def __init__(self, stage: str, fail: bool = False) -> None:
        if fail:
            raise FileNotFoundError(f"no taskset for stage {stage}")
        Role.built += 1
        self.stage = stage
        self.model = [0.0] * 1000

    def run(self) -> str:
        return self.stage


def test_a_retired_role_holds_nothing_and_restarts_with_new_arguments() -> None:
    role = deferred_start_errors(reusable(Role))("sft")
    assert type(role).__name__ == "Role" and role.run() == "sft"
    role.retire()
    assert not hasattr(role, "model") and not hasattr(role, "stage")
    role.restart("rft")
    assert role.run() == "rft" and len(role.model) == 1000


def test_a_restart_that_fails_is_raised_by_the_next_call_as_a_new_actors_start() -> None:
    role = deferred_start_errors(reusable(Role))("sft")
    role.retire()
    role.restart("rft", fail=True)  # does not raise: the driver's first call does
    with pytest.raises(FileNotFoundError, match="no taskset for stage rft"):
        role.run()
    role.retire()
    role.restart("grpo")  # the error is the failed stage's only
    assert role.run() == "grpo"


class Handle:
    """What StageActors sees of a Ray actor: ``.remote`` calls, here run at once."""

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __getattr__(self, name: str):
        method = getattr(self.obj, name)
        return type("Method", (), {"remote": staticmethod(method)})


class Creator:
    def __init__(self) -> None:
        self.started: list[Handle] = []

    def __call__(self):
        def remote(*args):
            self.started.append(Handle(deferred_start_errors(reusable(Role))(*args)))
            return self.started[-1]

        return type("Options", (), {"remote": staticmethod(remote)})


def test_a_kept_actor_is_taken_by_the_same_key_only() -> None:
    kept, create = StageActors(), Creator()
    first, rebuilt = kept.start(("explorer", "explorer"), create, "sft")
    assert rebuilt is None and len(create.started) == 1
    kept.keep(("explorer", "explorer"), first)
    assert not hasattr(first.obj, "model")  # retired while kept
    # another key (another actor name) gets an actor of its own
    other, _ = kept.start(("buffer", "exp_b"), create, "x")
    assert other is not first and len(create.started) == 2
    again, rebuilt = kept.start(("explorer", "explorer"), create, "rft")
    assert again is first and len(create.started) == 2
    assert again.obj.run() == "rft"
    # taken: a second start of the key in the same stage starts a new actor
    third, _ = kept.start(("explorer", "explorer"), create, "grpo")
    assert third is not first and len(create.started) == 3


def test_a_kept_actor_in_the_way_of_a_new_ones_name_is_stopped_first(monkeypatch) -> None:
    import ray

    from trinity.launch import stage_actors

    killed, waited = [], []
    monkeypatch.setattr(ray, "kill", killed.append)
    monkeypatch.setattr(stage_actors, "wait_until_released", waited.append)
    kept, create = StageActors(), Creator()
    old, _ = kept.start(("explorer", "explorer", "env A"), create, "sft")
    buffer, _ = kept.start(("buffer", "exp_a"), create, "sft")
    kept.keep(("explorer", "explorer", "env A"), old)
    kept.keep(("buffer", "exp_a"), buffer)
    # same name, other options (explorer.env_vars): the kept one must free the name
    new, rebuilt = kept.start(("explorer", "explorer", "env B"), create, "rft")
    assert new is not old and rebuilt is None
    assert killed == [old] and waited == [["explorer"]]
    # the stage has its actors: the buffer it did not take is stopped
    kept.kill_all()
    assert killed == [old, buffer]
