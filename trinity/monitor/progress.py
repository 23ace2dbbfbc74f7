"""Progress of a run on stderr: step, ETA and the latest reward/loss.

On a terminal this is a tqdm bar. When stderr is not a terminal (CI, ``| tee``, Ray
log files) a bar's carriage returns turn into one endless line, so a plain line is
printed instead, at most every ``min_interval`` seconds and always for the last step::

    train: step 30/100 (30%) elapsed 01:00 eta 02:20 | loss=0.0132 reward=0.5
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from trinity.monitor.base import format_value


def format_duration(seconds: float) -> str:
    """``83`` -> ``01:23``; ``3723`` -> ``1:02:03``."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _postfix_text(postfix: dict[str, Any]) -> str:
    parts = []
    for key in sorted(postfix):
        value = postfix[key]
        text = format_value(float(value)) if isinstance(value, (int, float)) else str(value)
        parts.append(f"{key}={text}")
    return " ".join(parts)


class Progress:
    """Shows ``step/total_steps``; ``update`` takes the absolute step, not an increment.

    Args:
        total_steps: the last step, or ``None`` if unknown (no ETA then).
        desc: the label in front of the line, e.g. ``"explore"``.
        initial_step: the step a resumed run starts from; the ETA uses only new steps.
        file: where to write (default stderr).
        min_interval: seconds between plain lines when ``file`` is not a terminal.
        clock: time source in seconds; tests pass a fake one.
    """

    def __init__(
        self,
        total_steps: int | None,
        desc: str,
        *,
        initial_step: int = 0,
        file: TextIO | None = None,
        min_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total_steps = total_steps
        self.desc = desc
        self.file = file if file is not None else sys.stderr
        self.min_interval = min_interval
        self.clock = clock
        self.initial_step = initial_step
        self.step = initial_step
        self._start = clock()
        self._last_print: float | None = None
        self._bar = None
        if _is_tty(self.file):
            from tqdm import tqdm

            self._bar = tqdm(
                total=total_steps, initial=initial_step, desc=desc, file=self.file, unit="step"
            )

    def update(self, step: int, **postfix: Any) -> None:
        """Record that ``step`` is done; ``postfix`` values (reward=..., loss=...) are shown."""
        self.step = step
        if self._bar is not None:
            self._bar.set_postfix_str(_postfix_text(postfix), refresh=False)
            if step != self._bar.n:
                self._bar.update(step - self._bar.n)
            else:
                self._bar.refresh()  # new postfix for the same step
            return
        now = self.clock()
        done = self.total_steps is not None and step >= self.total_steps
        if done or self._last_print is None or now - self._last_print >= self.min_interval:
            self._last_print = now
            print(self.line(step, now, postfix), file=self.file, flush=True)

    def eta_seconds(self, step: int, now: float) -> float | None:
        """Remaining time at the average pace of the steps done since the start."""
        done = step - self.initial_step
        if self.total_steps is None or done <= 0:
            return None
        return (now - self._start) / done * max(self.total_steps - step, 0)

    def line(self, step: int, now: float, postfix: dict[str, Any]) -> str:
        """The plain-text progress line (what non-terminal output shows)."""
        if self.total_steps:
            head = (
                f"{self.desc}: step {step}/{self.total_steps} ({100 * step // self.total_steps}%)"
            )
        else:
            head = f"{self.desc}: step {step}"
        text = f"{head} elapsed {format_duration(now - self._start)}"
        eta = self.eta_seconds(step, now)
        if eta is not None:
            text += f" eta {format_duration(eta)}"
        if postfix:
            text += f" | {_postfix_text(postfix)}"
        return text

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_tty(file: TextIO) -> bool:
    isatty = getattr(file, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False
