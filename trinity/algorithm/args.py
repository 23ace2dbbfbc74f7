"""Typed arguments of the algorithm's parts, built from the config's ``*_args`` dicts.

Every part (advantage function, policy loss, KL, entropy, sample strategy) declares an
``Args`` dataclass. ``build_args`` turns the YAML mapping (``policy_loss_fn_args``, ...)
into that dataclass and refuses names or types it does not know, so a typo such as
``clip_rnage`` fails at start-up instead of silently using the default. ``build_args``
and the built-in parts' ``Args`` live in ``trinity.config.part_args``, which imports no
torch, so that config validation can use them in the driver.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from trinity.config.part_args.build import InvalidArgsError, build_args
from trinity.utils.registry import Registry

__all__ = ["Configurable", "InvalidArgsError", "build", "build_args"]


class Configurable(Protocol):
    """A part whose constructor takes its ``Args`` dataclass."""

    Args: type

    def __init__(self, args: Any = None) -> None: ...


def build(registry: Registry, name: str, args: Mapping[str, Any] | None = None) -> Any:
    """Look ``name`` up in ``registry`` and construct it from the config's args mapping.

    Example: ``build(POLICY_LOSS_FN, "ppo", {"clip_range": 0.2})``.
    """
    cls = registry.get(name)
    if not dataclasses.is_dataclass(getattr(cls, "Args", None)):
        raise TypeError(f"{registry.kind} '{name}' ({cls!r}) has no Args dataclass")
    return cls(build_args(cls.Args, args, owner=f"{registry.kind} '{name}'"))
