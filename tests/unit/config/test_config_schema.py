"""The schema itself: every field documented, defaults valid, and in step with the algorithms."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from trinity.config import Config, config_from_dict, to_dict
from trinity.config.algorithm_defaults import ALGORITHM_DEFAULTS
from trinity.config.convert import field_types


def all_sections() -> list[type]:
    seen: list[type] = []
    todo = [Config]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        for tp in field_types(cls).values():
            stack = [tp]
            while stack:
                t = stack.pop()
                if dataclasses.is_dataclass(t):
                    todo.append(t)
                stack.extend(typing.get_args(t))
    return seen


@pytest.mark.parametrize("cls", all_sections(), ids=lambda c: c.__name__)
def test_every_field_has_a_one_line_help(cls: type) -> None:
    for f in dataclasses.fields(cls):
        text = f.metadata.get("help", "")
        assert text and "\n" not in text, f"{cls.__name__}.{f.name}"


def test_defaults_survive_the_strict_conversion() -> None:
    assert config_from_dict(to_dict(Config())) == Config()


def test_table_agrees_with_the_algorithm_types() -> None:
    try:
        import trinity.algorithm  # noqa: F401
        from trinity.algorithm.registries import ALGORITHM_TYPE
    except ImportError:
        pytest.skip("algorithm types are not available")
    for name, row in ALGORITHM_DEFAULTS.items():
        if name not in ALGORITHM_TYPE:
            continue
        theirs = ALGORITHM_TYPE.get(name)
        assert row.policy_loss_fn == theirs.policy_loss_fn, name
        assert row.advantage_fn == (theirs.advantage_fn or "none"), name
        assert (row.kl_loss_fn, row.kl_penalty_fn) == (theirs.kl_loss_fn, theirs.kl_penalty_fn), (
            name
        )
        assert (row.entropy_loss_fn, row.sample_strategy) == (
            theirs.entropy_loss_fn,
            theirs.sample_strategy,
        ), name
        assert row.use_critic == theirs.use_critic, name
        assert row.needs_group == (theirs.min_repeat_times > 1), name
        assert row.fixed_repeat_times == theirs.repeat_times, name
