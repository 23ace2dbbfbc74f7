import io

from trinity.monitor.progress import Progress, format_duration


class FakeClock:
    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    # start at t=0, then updates at t=10, 12, 16, 17
    progress = Progress(10, "train", file=out, min_interval=5, clock=FakeClock(0, 10, 12, 16, 17))
    progress.update(1, reward=0.5, loss=0.25)
    progress.update(2, reward=0.5)  # 2 s after the last line: throttled
    progress.update(3, reward=0.75)
    progress.update(10, reward=1.0)  # the last step is always shown
    progress.close()

    assert out.getvalue().splitlines() == [
        # 10 s for 1 step, 9 steps left: eta 90 s
        "train: step 1/10 (10%) elapsed 00:10 eta 01:30 | loss=0.25 reward=0.5",
        # 16 s for 3 steps, 7 left: 16 / 3 * 7 = 37.3 s
        "train: step 3/10 (30%) elapsed 00:16 eta 00:37 | reward=0.75",
        "train: step 10/10 (100%) elapsed 00:17 eta 00:00 | reward=1",
    ]


def test_eta_of_a_resumed_run_counts_only_new_steps():
    out = io.StringIO()
    progress = Progress(10, "explore", initial_step=5, file=out, clock=FakeClock(0, 4))
    progress.update(6)
    # 4 s for 1 new step, 4 steps left: 16 s
    assert out.getvalue() == "explore: step 6/10 (60%) elapsed 00:04 eta 00:16\n"


def test_unknown_total_has_no_eta():
    out = io.StringIO()
    Progress(None, "explore", file=out, clock=FakeClock(0, 65)).update(3, reward=0.5)
    assert out.getvalue() == "explore: step 3 elapsed 01:05 | reward=0.5\n"


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_tqdm_bar_on_a_terminal_shows_step_and_postfix():
    out = Terminal()
    with Progress(10, "train", file=out) as progress:
        progress.update(3, reward=0.5, loss=0.125)
    text = out.getvalue()
    assert "\r" in text  # redrawn in place, as a bar
    assert "3/10" in text
    assert "loss=0.125 reward=0.5" in text


def test_format_duration():
    assert format_duration(83) == "01:23"
    assert format_duration(3723) == "1:02:03"
