"""The Studio's form model without a browser: fields from the schema, layout, YAML, checks.

Fast; the browser test of the same page is ``test_studio.py``.
"""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime

import pytest

from trinity.config import Config, ConfigError, OptimizerConfig, load_config
from trinity.config.setting import help_of
from trinity.studio.fields import schema_fields
from trinity.studio.generate import (
    FieldValueError,
    check_config,
    config_data,
    field_of_error,
    parse_yaml_value,
    render_yaml,
    values_from_yaml,
)
from trinity.studio.layout import (
    ALWAYS_WRITTEN,
    BEGINNER_SECTIONS,
    EXPERT_SECTIONS,
    expert_fields,
)

FIELDS = schema_fields()
BY_PATH = {f.path: f for f in FIELDS}
NOW = datetime(2025, 1, 31, 12, 0, 0)


def _leaf_paths(cls: type, prefix: str = "") -> set[str]:
    """Every leaf key of the schema, walked independently of the Studio's walker."""
    hints = typing.get_type_hints(cls)
    paths: set[str] = set()
    for f in dataclasses.fields(cls):
        path = f"{prefix}.{f.name}" if prefix else f.name
        hint = hints[f.name]
        # a section is a dataclass or an optional one; lists and dicts of them are values
        options = (
            (hint,) if typing.get_origin(hint) in (list, dict) else (hint, *typing.get_args(hint))
        )
        section = next((t for t in options if dataclasses.is_dataclass(t)), None)
        if section is not None:
            paths |= _leaf_paths(section, path)
        elif f.name != "is_eval":  # set by resolve only
            paths.add(path)
    return paths


def test_every_schema_key_is_a_field_with_its_help():
    assert {f.path for f in FIELDS} == _leaf_paths(Config)
    assert BY_PATH["algorithm.optimizer.lr"].help == help_of(OptimizerConfig, "lr")
    assert all(f.help for f in FIELDS)


def test_widget_kinds_follow_the_types():
    kinds = {
        p: BY_PATH[p].kind
        for p in (
            "continue_from_checkpoint",
            "mode",
            "seed",
            "algorithm.optimizer.lr",
            "project",
            "buffer.explorer_input.eval_tasksets",
            "monitor.monitor_args",
            "algorithm.use_critic",
            "buffer.total_steps",
        )
    }
    assert kinds == {
        "continue_from_checkpoint": "bool",
        "mode": "choice",
        "seed": "int",
        "algorithm.optimizer.lr": "float",
        "project": "str",
        "buffer.explorer_input.eval_tasksets": "yaml",
        "monitor.monitor_args": "yaml",
        "algorithm.use_critic": "choice",  # bool | None: unset, true or false
        "buffer.total_steps": "int",
    }
    assert BY_PATH["mode"].choices == ("both", "train", "explore", "bench", "serve")
    assert BY_PATH["algorithm.use_critic"].choices == (None, True, False)
    assert BY_PATH["buffer.total_steps"].optional
    algo = BY_PATH["algorithm.algorithm_type"]
    assert algo.kind == "choice" and algo.open_choices and "grpo" in algo.choices
    assert "math_workflow" in BY_PATH["buffer.explorer_input.default_workflow_type"].choices


def test_each_key_is_in_exactly_one_expert_block_and_beginner_keys_exist():
    blocks = [{f.path for f in expert_fields(b, FIELDS)} for b in EXPERT_SECTIONS]
    assert sum(len(b) for b in blocks) == len(FIELDS)
    assert set().union(*blocks) == set(BY_PATH)
    beginner = [p for paths in BEGINNER_SECTIONS.values() for p in paths]
    assert len(beginner) == len(set(beginner))
    assert set(beginner) <= set(BY_PATH)


def _valid_values() -> dict:
    return {
        "model.model_path": "SmolLM2-135M-Instruct",
        "buffer.explorer_input.taskset.name": "arithmetic",
        "buffer.explorer_input.taskset.storage_type": "file",
        "buffer.explorer_input.taskset.path": "examples/arithmetic/data",
        "algorithm.algorithm_type": "grpo",
        "algorithm.repeat_times": 4,
        "buffer.batch_size": 2,
        "model.max_prompt_tokens": 64,
        "model.max_response_tokens": 32,
        "algorithm.optimizer.betas": [0.9, 0.99],
    }


def test_generated_yaml_holds_changes_and_essentials_and_loads(tmp_path):
    text = render_yaml(config_data(FIELDS, _valid_values(), ALWAYS_WRITTEN))

    assert check_config(text, now=NOW) is None
    path = tmp_path / "c.yaml"
    path.write_text(text)
    cfg = load_config(path, now=NOW)
    assert (cfg.algorithm.algorithm_type, cfg.algorithm.repeat_times) == ("grpo", 4)
    assert cfg.buffer.train_batch_size == 8  # derived: 2 tasks x 4 rollouts
    assert cfg.algorithm.optimizer.betas == [0.9, 0.99]
    # unchanged non-essential keys stay out, so derived values keep being derived
    assert "train_batch_size" not in text
    assert "seed" not in text
    # essential keys are written even at their default
    assert "project: Trinity-RFT" in text
    # an essential key left unset is not written as null
    assert "null" not in text


def test_invalid_combination_comes_back_as_the_run_error():
    values = {**_valid_values(), "algorithm.repeat_times": 1}
    error = check_config(render_yaml(config_data(FIELDS, values, ALWAYS_WRITTEN)), now=NOW)

    assert isinstance(error, ConfigError)
    assert error.path == "algorithm.repeat_times"
    assert "grpo needs repeat_times > 1" in str(error)
    assert field_of_error(error.path, BY_PATH) == "algorithm.repeat_times"


@pytest.mark.parametrize(
    ("error_path", "field"),
    [
        ("buffer.explorer_input.eval_tasksets[0].name", "buffer.explorer_input.eval_tasksets"),
        ("buffer.explorer_input.tasksets[0].path", "buffer.explorer_input.taskset.path"),
        ("algorithm.optimizer.lr", "algorithm.optimizer.lr"),
        ("buffer.trainer_input.auxiliary_buffers.sft", "buffer.trainer_input.auxiliary_buffers"),
        ("<root>", None),
    ],
)
def test_errors_point_at_the_field_they_are_about(error_path, field):
    assert field_of_error(error_path, BY_PATH) == field


def test_yaml_fields_parse_or_say_why():
    spec = BY_PATH["monitor.monitor_args"]
    assert parse_yaml_value(spec, "uri: sqlite:///m.db") == {"uri": "sqlite:///m.db"}
    assert parse_yaml_value(spec, "  ") == {}
    with pytest.raises(FieldValueError, match="monitor.monitor_args: not valid YAML"):
        parse_yaml_value(spec, "uri: [unclosed")


def test_an_existing_file_fills_the_form(tmp_path):
    text = (
        "project: p\nname: n\nalgorithm:\n  algorithm_type: grpo\n  repeat_times: 8\n"
        "buffer:\n  explorer_input:\n    taskset:\n      name: t\n      path: data\n"
    )
    values = values_from_yaml(text, FIELDS)

    assert values["algorithm.repeat_times"] == 8
    assert values["buffer.explorer_input.taskset.name"] == "t"
    assert "buffer.trainer_input.experience_buffer.name" not in values  # unset section
    regenerated = config_data(FIELDS, values)
    assert regenerated["algorithm"] == {"algorithm_type": "grpo", "repeat_times": 8}
    with pytest.raises(ConfigError, match="algorithm.repeat_timez"):
        values_from_yaml("algorithm:\n  repeat_timez: 2\n", FIELDS)
