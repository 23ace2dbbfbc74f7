"""Environment variables set for the length of a block, and restored after it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def scoped_environment(env_vars: dict[str, str]) -> Iterator[None]:
    """``env_vars`` set in this process's environment inside the block, and the
    environment as it was after it (mode bench, whose runners are the driver's threads;
    mlflow's credentials)."""
    saved = {str(k): os.environ.get(str(k)) for k in env_vars}
    os.environ.update({str(k): str(v) for k, v in env_vars.items()})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
