"""Tasksets and buffers are two types; a key of the other type, as Trinity-RFT's one storage
type allows, loads and is reported without effect, and a key of neither type still fails."""

from __future__ import annotations

from typing import Any

import pytest

from trinity.config import ConfigError, config_from_dict, to_dict
from trinity.config.no_effect import set_without_effect
from trinity.config.schema import ExperienceBufferConfig, TasksetConfig
from trinity.config.upstream.storage_kinds import (
    AUXILIARY_BUFFERS,
    EXPERIENCE_BUFFER,
    OTHER_KIND,
    OWN_KEYS,
    TASKSETS,
    carried_keys,
)


def test_every_key_of_the_other_kind_has_a_reason_on_every_storage() -> None:
    expected = {f"{t}.{key}" for t in TASKSETS for key in OWN_KEYS[ExperienceBufferConfig]}
    expected |= {
        f"{b}.{key}"
        for b in (EXPERIENCE_BUFFER, AUXILIARY_BUFFERS)
        for key in OWN_KEYS[TasksetConfig]
    }
    assert set(OTHER_KIND) == expected
    assert not set(OWN_KEYS[TasksetConfig]) & set(OWN_KEYS[ExperienceBufferConfig])


def test_the_other_kinds_keys_leave_the_typed_config(minimal: dict[str, Any]) -> None:
    minimal["buffer"]["explorer_input"]["taskset"]["capacity"] = 50
    cfg = config_from_dict(minimal)
    assert isinstance(cfg.buffer.explorer_input.taskset, TasksetConfig)
    assert not hasattr(cfg.buffer.explorer_input.taskset, "capacity")
    assert "capacity" not in to_dict(cfg)["buffer"]["explorer_input"]["taskset"]
    [carried] = carried_keys(cfg)
    assert (carried.where, carried.kind, carried.values) == (
        "buffer.explorer_input.taskset",
        ExperienceBufferConfig,
        {"capacity": 50},
    )


def test_a_key_of_neither_kind_is_unknown(minimal: dict[str, Any]) -> None:
    minimal["buffer"]["explorer_input"]["taskset"]["capacityy"] = 50
    with pytest.raises(
        ConfigError, match=r"buffer\.explorer_input\.taskset\.capacityy.*unknown key"
    ):
        config_from_dict(minimal)


def test_a_value_of_the_other_kind_is_checked_against_its_type(minimal: dict[str, Any]) -> None:
    minimal["buffer"]["trainer_input"]["experience_buffer"]["repeat_times"] = "many"
    with pytest.raises(ConfigError, match=r"experience_buffer\.repeat_times.*must be an integer"):
        config_from_dict(minimal)


def test_a_value_at_the_default_of_the_other_kind_is_not_reported(minimal: dict[str, Any]) -> None:
    minimal["buffer"]["explorer_input"]["taskset"]["capacity"] = 10000
    assert set_without_effect(config_from_dict(minimal)) == []


def test_keys_of_the_other_kind_in_a_stage_are_reported_under_it(minimal: dict[str, Any]) -> None:
    aux = {"sft": {"path": "/d", "repeat_times": 2}}
    minimal["stages"] = [
        {"stage_name": "a", "buffer": {"trainer_input": {"auxiliary_buffers": aux}}},
        {"stage_name": "b", "buffer": {"explorer_input": {"eval_tasksets": [{"name": "e"}] * 2}}},
    ]
    minimal["stages"][1]["buffer"]["explorer_input"]["eval_tasksets"][1] = {
        "name": "f",
        "replay_buffer": {"enable": True},
    }
    found = dict(set_without_effect(config_from_dict(minimal)))
    assert list(found) == [
        "stages[0].buffer.trainer_input.auxiliary_buffers.sft.repeat_times",
        "stages[1].buffer.explorer_input.eval_tasksets[1].replay_buffer.enable",
    ]
    assert "auxiliary buffer holds SFT rows" in found[next(iter(found))]
    assert (
        "priority is for queues"
        in found["stages[1].buffer.explorer_input.eval_tasksets[1].replay_buffer.enable"]
    )
