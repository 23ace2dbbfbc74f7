"""The schema itself: every field documented, defaults valid, and in step with the algorithms."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from trinity.config import Config, config_from_dict, to_dict
from trinity.config.algorithm_defaults import ALGORITHM_DEFAULTS
from trinity.config.typed_yaml import field_types


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


# (needs_reference, needs_group, fixed_repeat_times, use_rollout), written out by hand: DPO's
# loss compares with the reference; group advantages need 2 rollouts a task
EXPECTED_FLAGS = {
    "sft": (False, False, None, False),  # trains on a dataset
    "ppo": (False, False, None, True),  # GAE needs no group
    "grpo": (False, True, None, True),
    "dpo": (True, False, 2, False),  # one chosen and one rejected response
    "gspo": (False, True, None, True),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_FLAGS))
def test_algorithm_type_registry_holds_the_table_records(name: str) -> None:
    from trinity.algorithm.registries import ALGORITHM_TYPE

    record = ALGORITHM_TYPE.get(name)
    assert record is ALGORITHM_DEFAULTS[name]
    flags = (record.needs_reference, record.needs_group, record.fixed_repeat_times)
    assert (*flags, record.use_rollout) == EXPECTED_FLAGS[name]
    # "none": the loss needs no advantages
    expected_advantage = {
        "sft": "none",
        "dpo": "none",
        "ppo": "ppo",
        "grpo": "grpo",
        "gspo": "grpo",
    }
    assert record.advantage_fn == expected_advantage[name]


def test_every_part_the_table_names_is_registered() -> None:
    from trinity.algorithm import registries
    from trinity.config.algorithm_defaults import NONE, PART_KINDS, PART_NAMES

    by_kind = {
        registry.kind: registry
        for registry in (
            registries.ADVANTAGE_FN,
            registries.POLICY_LOSS_FN,
            registries.KL_FN,
            registries.ENTROPY_LOSS_FN,
            registries.SAMPLE_STRATEGY,
        )
    }
    for name, row in ALGORITHM_DEFAULTS.items():
        for part in PART_NAMES:
            value = getattr(row, part)
            assert value == NONE or value in by_kind[PART_KINDS[part]], f"{name}.{part}={value}"
