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


# (use_reference, min_repeat_times, repeat_times, use_rollout), written out by hand:
# a reference model runs for a KL part or for DPO; group advantages need 2 rollouts a task
EXPECTED_FLAGS = {
    "sft": (False, 1, None, False),  # no KL part, trains on a dataset
    "ppo": (True, 1, None, True),  # k2 KL loss; GAE needs no group
    "grpo": (True, 2, None, True),
    "dpo": (True, 1, 2, False),  # no KL part, but the loss compares with the reference
    "gspo": (False, 2, None, True),  # both KL parts are none
}


@pytest.mark.parametrize("name", sorted(EXPECTED_FLAGS))
def test_algorithm_type_records_derive_their_flags(name: str) -> None:
    from trinity.algorithm.registries import ALGORITHM_TYPE

    record = ALGORITHM_TYPE.get(name)
    flags = (record.use_reference, record.min_repeat_times, record.repeat_times, record.use_rollout)
    assert flags == EXPECTED_FLAGS[name]
    # the table's "none" is the record's None: the loss needs no advantages
    expected_advantage = {"sft": None, "dpo": None, "ppo": "ppo", "grpo": "grpo", "gspo": "grpo"}
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
