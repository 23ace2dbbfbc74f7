"""The config loader under hypothesis: whatever a YAML file holds, loading it ends in a
valid ``Config`` or a one-line ``ConfigError`` with a key path, never another exception.

Three generators: random values at the schema's real keys of a valid config (wrong
types, nulls, lists where maps belong, huge numbers, non-string keys), random nested
mappings at the top level (unknown keys and sections), and random YAML text. Bounded:
a fixed number of examples each, no example database. The CLI turns the same errors
into one line on stderr and exit code 2.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import tempfile
import typing
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from config_testing import minimal_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trinity.config import Config, ConfigError, config_from_dict, load_config, resolve, validate
from trinity.config.schema import Config as ConfigSchema
from trinity.config.typed_yaml import field_types

NOW = datetime(2024, 5, 6, 7, 8, 9)
FUZZ = settings(
    max_examples=150,
    deadline=5000,  # ms per example: loading a config is a few milliseconds
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _schema_fields(
    cls: type = ConfigSchema, prefix: tuple[str, ...] = ()
) -> dict[tuple[str, ...], Any]:
    """Key path -> type of every schema field, sections included."""
    fields = {}
    for key, tp in field_types(cls).items():
        path = (*prefix, key)
        fields[path] = tp
        sections = [a for a in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(a)]
        for section in sections[:1]:
            fields.update(_schema_fields(section, path))
    return fields


FIELDS = _schema_fields()
PATHS = list(FIELDS)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**18, max_value=10**400) | st.integers(max_value=-(10**18)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "",
            "None",
            "null",
            "1e-5",
            "0x10",
            "???",
            "${model.model_path}",
            "${oc.env:NO_SUCH_VARIABLE}",
            "${nowhere}",
            "yes",
            "on",
            "-1",
            "1_000",
        ]
    ),
)
keys = st.one_of(
    st.text(max_size=12),
    st.integers(),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.sampled_from([k for path in PATHS for k in path[-1:]]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)


def typed(tp: Any) -> st.SearchStrategy[Any]:
    """Values of the right type for ``tp`` but any size: zero, negative, huge, nan."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if type(None) in args:
        return st.none() | typed(next(a for a in args if a is not type(None)))
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(typed(args[0]), max_size=3)
    if dataclasses.is_dataclass(tp):
        return st.fixed_dictionaries({}, optional={k: typed(t) for k, t in field_types(tp).items()})
    return {
        bool: st.booleans(),
        int: st.integers() | st.sampled_from([0, -1, 1, 2**63, 10**400, -(10**400)]),
        float: st.floats() | st.sampled_from([0.0, -0.0, 1e308, math.inf, -math.inf, math.nan]),
        str: st.text(max_size=10) | st.sampled_from(["", "none", "null", "a.b.C", "1e-5"]),
    }.get(tp, values)


def _put(data: dict[Any, Any], path: tuple[str, ...], value: Any) -> None:
    """data[a][b][c] = value; a section on the way that is not a mapping becomes one."""
    for key in path[:-1]:
        if not isinstance(data.get(key), dict):
            data[key] = {}
        data = data[key]
    data[path[-1]] = value


def _dump(data: Any) -> str:
    # non-string keys and any scalar: PyYAML's full dumper writes what safe_dump refuses
    # (e.g. a float nan key); the loader only ever reads it back with safe rules
    try:
        return yaml.safe_dump(data, allow_unicode=True)
    except yaml.representer.RepresenterError:
        return yaml.dump(data, allow_unicode=True)


def load_outcome(text: str, overrides: tuple[str, ...] = ()) -> Config | ConfigError:
    """Load ``text`` as a config file: the config, or the ConfigError it raised."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            return load_config(path, overrides, now=NOW)
        except ConfigError as err:
            return err


def assert_clean(outcome: Config | ConfigError) -> None:
    """A valid config, or a ConfigError whose message is one keyed line."""
    if isinstance(outcome, Config):
        return
    message = str(outcome)
    assert "\n" not in message and "\r" not in message, message
    where = (outcome.path or "<root>").replace("\r", " ").replace("\n", " ")
    assert message.startswith(f"{where}: "), message
    assert outcome.problem, message


@pytest.fixture(autouse=True)
def _no_env_leak(monkeypatch):
    monkeypatch.delenv("NO_SUCH_VARIABLE", raising=False)


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3))
def test_random_values_at_real_keys(edits, tmp_path):
    data = minimal_config(tmp_path)
    for path, value in edits:
        _put(data, path, value)
    assert_clean(load_outcome(_dump(data)))


@FUZZ
@given(data=st.data())
def test_values_of_the_right_type_at_real_keys(data, tmp_path):
    config = minimal_config(tmp_path)
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        path = data.draw(st.sampled_from(PATHS), label="key")
        _put(config, path, data.draw(typed(FIELDS[path]), label="value"))
    assert_clean(load_outcome(_dump(config)))


@FUZZ
@given(
    top=st.dictionaries(keys, values, max_size=5),
    sections=st.dictionaries(st.sampled_from([p[0] for p in PATHS]), values, max_size=3),
)
def test_random_mappings_at_the_top_level(top, sections, tmp_path):
    data = {**minimal_config(tmp_path), **top, **sections}
    assert_clean(load_outcome(_dump(data)))


yaml_text = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.sampled_from(
            [
                "project: p",
                "model:",
                "  model_path: m",
                "- a",
                "? [1, 2]",
                ": x",
                "&a [*a]",
                "buffer: {batch_size: [",
                "!!python/object:os.system {}",
                "{",
                "'",
                '"\\x',
                "\t- tab",
                "key: !!binary AAAA",
                "a: &x 1",
                "b: *y",
                "<<: *x",
                "...",
                "---",
                "model: null",
                "algorithm: []",
                "1: 2",
                "null: 3",
                "buffer: {explorer_input: 7}",
                "name: ${oc.env:NO_SUCH_VARIABLE}",
                "name: ${",
                "stages: {}",
                "stages: [1]",
            ]
        ),
        max_size=8,
    ).map("\n".join),
)


@FUZZ
@given(text=yaml_text)
def test_random_yaml_text(text):
    assert_clean(load_outcome(text))


@FUZZ
@given(
    overrides=st.lists(
        st.text(max_size=30)
        | st.sampled_from(
            [
                "model",
                "=1",
                "model=",
                "model.model_path=",
                "buffer=[1]",
                "buffer.batch_size=1e400",
                "a.b=c",
                "model.max_model_len=${x}",
                "stages[0]=1",
                "x=${",
                "..=1",
                "model..x=1",
            ]
        ),
        max_size=3,
    )
)
def test_random_overrides(overrides, tmp_path):
    assert_clean(load_outcome(_dump(minimal_config(tmp_path)), tuple(overrides)))


@FUZZ
@given(content=st.binary(max_size=200))
def test_random_bytes(content):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.yaml"
        path.write_bytes(content)
        try:
            outcome = load_config(path, now=NOW)
        except ConfigError as err:
            outcome = err
    assert_clean(outcome)


# ---- what the generators found: each raised another exception before its fix ----------

HUGE = "9" * 5000  # more digits than Python turns into an int by default (4300)
FOUND = {
    # resolve divided by train_batch_size before validate saw it was 0
    "zero_batch": lambda root: _dump(
        minimal_config(root) | {"buffer": {"batch_size": 0, "total_steps": 3}}
    ),
    # OmegaConf refuses a scalar document with an OSError
    "scalar": lambda root: "0\n",
    # a file that is not UTF-8
    "bytes": lambda root: b"project: \xff\xfe\n",
    # PyYAML's int() of a 5000-digit number raises ValueError
    "long_int": lambda root: f"buffer:\n  batch_size: {HUGE}\n",
}


def _write(tmp_path: Path, name: str) -> Path:
    content = FOUND[name](tmp_path)
    path = tmp_path / f"{name}.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "where", "needle"),
    [
        ("zero_batch", "buffer.batch_size", "must be > 0"),
        ("scalar", "", "must hold a mapping"),
        ("bytes", "", "not UTF-8"),
        ("long_int", "", "cannot parse"),
    ],
)
def test_found_files_fail_with_a_config_error(tmp_path, name, where, needle):
    with pytest.raises(ConfigError) as caught:
        load_config(_write(tmp_path, name), now=NOW)
    assert caught.value.path == where and needle in str(caught.value)
    assert_clean(caught.value)


@pytest.mark.parametrize("override", ["name=\x1f", f"buffer.batch_size={HUGE}"])
def test_found_overrides_fail_with_a_config_error(tmp_path, override):
    path = tmp_path / "run.yaml"
    path.write_text(_dump(minimal_config(tmp_path)), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, [override], now=NOW)
    assert caught.value.path == override.partition("=")[0]
    assert "cannot apply override" in str(caught.value)


def test_steps_of_a_huge_total_are_exact(tmp_path):
    # total_steps * batch_size * repeat_times / train_batch_size went through a float,
    # which overflowed past 1e308; 3e400 experiences in batches of 2 * 4 rollouts
    data = minimal_config(tmp_path)
    data["buffer"]["total_steps"] = 3 * 10**400
    path = tmp_path / "run.yaml"
    path.write_text(_dump(data), encoding="utf-8")
    cfg = load_config(path, now=NOW)
    assert cfg.trainer.total_steps == 3 * 10**400  # 3e400 * 2 * 4 // (2 * 4)


def test_a_value_too_long_to_print_still_makes_a_one_line_error(tmp_path):
    data = minimal_config(tmp_path)
    data["buffer"]["batch_size"] = -(10**5000)
    with pytest.raises(ConfigError) as caught:
        validate(resolve(config_from_dict(data), now=NOW))
    assert str(caught.value) == (
        "buffer.batch_size: must be > 0 (given: <int too large to print>); a value > 0"
    )


@pytest.mark.parametrize("name", sorted(FOUND))
def test_cli_prints_one_line_and_exits_2(tmp_path, name):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trinity",
            "run",
            "--config",
            str(_write(tmp_path, name)),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("trinity: config error: ")
    assert done.stdout == ""
