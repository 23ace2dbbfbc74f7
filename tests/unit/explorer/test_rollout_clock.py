"""The rollout clock's figures: installs overlapping a rollout, idle gaps between rollouts."""

from __future__ import annotations

import pytest

from trinity.explorer.rollout_clock import RolloutClock


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_steps_in_turn_show_the_gap_before_each_rollout() -> None:
    t = FakeClock()
    clock = RolloutClock(t)
    with clock.rolling(1):
        t.now = 2.0
    t.now = 5.0  # 3 s with nothing rolling out: the explorer waited
    with clock.rolling(2):
        t.now = 6.0
    assert clock.step_metrics(1) == {"time/wait_weights": 0.0, "time/explorer_idle": 0.0}
    assert clock.step_metrics(2) == {"time/wait_weights": 0.0, "time/explorer_idle": 3.0}


def test_overlapping_rollouts_leave_no_gap_and_installs_count_where_they_overlap() -> None:
    t = FakeClock()
    clock = RolloutClock(t)
    first = clock.rolling(1)
    first.__enter__()
    t.now = 1.0
    second = clock.rolling(2)  # begins while step 1 still rolls out
    second.__enter__()
    t.now = 1.5
    with clock.installing():  # weights swapped while both roll out
        t.now = 1.75
    t.now = 2.0
    first.__exit__(None, None, None)
    t.now = 3.0
    with clock.installing():  # only step 2 is still rolling out
        t.now = 3.5
    second.__exit__(None, None, None)
    one, two = clock.step_metrics(1), clock.step_metrics(2)
    assert one == {"time/wait_weights": pytest.approx(0.25), "time/explorer_idle": 0.0}
    assert two == {"time/wait_weights": pytest.approx(0.75), "time/explorer_idle": 0.0}
    with pytest.raises(KeyError):  # handed out once
        clock.step_metrics(1)


def test_an_install_between_rollouts_is_idle_time_not_a_rollout_stall() -> None:
    t = FakeClock()
    clock = RolloutClock(t)
    with clock.rolling(1):
        t.now = 1.0
    with clock.installing():
        t.now = 1.5
    with clock.rolling(2):
        t.now = 2.0
    clock.step_metrics(1)
    assert clock.step_metrics(2) == {"time/wait_weights": 0.0, "time/explorer_idle": 0.5}
