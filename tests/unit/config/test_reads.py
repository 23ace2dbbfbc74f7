"""record_reads: the keys code reads, under their docs/config.md paths, only inside the block."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from trinity.config import config_from_dict
from trinity.config.reads import record_reads, schema_classes
from trinity.config.schema import Config, TasksetConfig


def test_reads_are_recorded_under_their_key_paths(minimal: dict[str, Any]) -> None:
    minimal["buffer"]["trainer_input"]["auxiliary_buffers"] = {"sft": {"path": "/data/sft"}}
    minimal["explorer"] = {"auxiliary_models": [{"model_path": "judge"}]}
    cfg = config_from_dict(minimal)
    with record_reads() as reads:
        assert cfg.buffer.explorer_input.taskset.path == "/data/tasks"
        judge = cfg.explorer.auxiliary_models[0]
        assert judge.model_path == "judge"
        for storage in cfg.buffer.trainer_input.auxiliary_buffers.values():
            assert storage.path == "/data/sft"
    assert {
        "buffer.explorer_input.taskset.path",
        "explorer.auxiliary_models[].model_path",
        "buffer.trainer_input.auxiliary_buffers.<name>.path",
    } <= reads.keys()
    assert reads.readers["explorer.auxiliary_models[].model_path"] == {"<other>"}  # this test


def test_nothing_is_recorded_or_patched_outside_the_block(minimal: dict[str, Any]) -> None:
    cfg = config_from_dict(minimal)
    with record_reads() as reads:
        pass
    assert cfg.model.model_path == "tiny-model"
    assert reads.readers == {}
    assert all("__getattribute__" not in vars(cls) for cls in schema_classes())


def test_copies_are_told_apart_from_conversions(minimal: dict[str, Any]) -> None:
    cfg = config_from_dict(minimal)
    with record_reads() as reads:
        # an instance is placed when read from its parent inside the block
        dataclasses.replace(cfg.buffer.explorer_input.taskset, path="/data/other")
        copied = set(reads.readers["buffer.explorer_input.taskset.repeat_times"])
        dataclasses.asdict(cfg.buffer.explorer_input.taskset.format)
    assert copied == {"<copy>"}
    assert reads.readers["buffer.explorer_input.taskset.format.prompt_key"] == {"<other>"}


def test_an_instance_built_outside_a_config_is_recorded_by_its_class() -> None:
    with record_reads() as reads:
        assert TasksetConfig(name="loose").name == "loose"
    assert "?TasksetConfig.name" in reads.keys()


def test_one_recording_at_a_time() -> None:
    with record_reads(), pytest.raises(RuntimeError, match="already recording"):
        with record_reads():
            pass
    with record_reads(Config):  # the lock is released again
        pass
