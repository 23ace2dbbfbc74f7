"""Typed arguments of the algorithm's built-in parts, importable without torch.

Each built-in part of ``trinity.algorithm`` (advantage function, policy loss, KL,
entropy, sample strategy) takes one of these dataclasses as its ``Args``; the part
classes live with their tensor code and import torch, these do not. Config validation
reads ``BUILTIN_PART_ARGS`` and ``build_args`` to check a config's ``*_args`` mappings
of built-in parts in the driver, which never needs torch.
"""

from trinity.config.part_args.build import InvalidArgsError, build_args
from trinity.config.part_args.builtin import BUILTIN_PART_ARGS

__all__ = ["BUILTIN_PART_ARGS", "InvalidArgsError", "build_args"]
