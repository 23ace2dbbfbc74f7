"""deferred_start_errors: a role whose constructor fails raises that error from its calls."""

from __future__ import annotations

import pytest

from trinity.launch.actor_start import deferred_start_errors


class Base:
    def shutdown(self) -> str:
        return "shut down"


class Role(Base):
    def __init__(self, fail: bool) -> None:
        if fail:
            raise KeyError("missing key 'prompt'")
        self.steps = 0

    def run(self, steps: int) -> int:
        self.steps += steps
        return self.steps

    def _private(self) -> str:
        return "private"


def test_a_role_that_starts_behaves_as_itself() -> None:
    role = deferred_start_errors(Role)(fail=False)
    assert isinstance(role, Role) and type(role).__name__ == "Role"
    assert role.run(2) == 2 and role.run(3) == 5
    assert role.shutdown() == "shut down"


def test_a_start_error_is_raised_by_every_public_call() -> None:
    role = deferred_start_errors(Role)(fail=True)  # the constructor itself does not raise
    for call in (lambda: role.run(1), role.shutdown):  # inherited methods too
        with pytest.raises(KeyError, match="missing key 'prompt'") as info:
            call()
        # the original traceback: the line of Role.__init__ that raised
        assert any(f.name == "__init__" for f in info.traceback)
    assert role._private() == "private"  # private helpers are left alone


def test_interrupts_are_not_kept() -> None:
    class Interrupted:
        def __init__(self) -> None:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        deferred_start_errors(Interrupted)()
