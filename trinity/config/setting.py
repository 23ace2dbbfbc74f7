"""The one way a config field is declared: a default and a one-line help string.

Every field of the schema is ``name: type = setting(default, "help")``. The help text
lives in ``dataclasses.field(metadata={"help": ...})`` so tools (``trinity studio``,
``dry_run_report``, error messages) can show it next to the key.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any


def setting(
    default: Any = dataclasses.MISSING, help: str = "", *, factory: Callable[[], Any] | None = None
) -> Any:
    """Declare a config field.

    ``default`` may be a plain value, a list or dict (copied for every instance), or a
    dataclass type (a fresh default instance per config). ``factory`` builds defaults that
    need arguments, e.g. ``factory=lambda: OptimizerConfig(lr=1e-5)``.
    """
    if not help:
        raise ValueError("every config field needs a help string")
    metadata = {"help": help}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    if isinstance(default, type) and dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=default, metadata=metadata)
    if isinstance(default, (list, dict)):
        frozen = copy.deepcopy(default)
        return dataclasses.field(default_factory=lambda: copy.deepcopy(frozen), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def help_of(cls: type, name: str) -> str:
    """The help string of field ``name`` of the config dataclass ``cls``."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get("help", "")
    raise KeyError(name)
