"""Reading a config file: YAML + interpolation + command-line overrides -> checked ``Config``.

``load_config("run.yaml", ["algorithm.optimizer.lr=1e-5"])`` is the whole path from a
file to a resolved, validated config. OmegaConf does the reading, so ``${model.model_path}``
and ``${oc.env:VAR,default}`` work anywhere in the file; ``${a.key}`` of a key the file
leaves out reads the schema's default (``interpolation.py``).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    InterpolationResolutionError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

from trinity.config.derived import check_trainer_config_source, resolve
from trinity.config.errors import ConfigError
from trinity.config.schema import Config, VerlTrainerConfig
from trinity.config.stages import apply_stage, expand_stages
from trinity.config.typed_yaml import build, to_plain
from trinity.config.upstream.interpolation import fill_referenced_defaults
from trinity.config.upstream.notes import log_config_notes
from trinity.config.upstream.spellings import upstream_spellings
from trinity.config.upstream.storage_kinds import keep_other_kind_keys, take_other_kind_keys
from trinity.config.validate import validate

OVERRIDE_HELP = "key=value, e.g. algorithm.optimizer.lr=1e-5 or buffer.explorer_input.eval_tasksets[0].repeat_times=4"


def load_config(
    path: str | Path, overrides: Sequence[str] = (), *, now: datetime | None = None
) -> Config:
    """Read, override, check, resolve and validate a config file (stages included).

    ``now`` stamps the experiment name when ``continue_from_checkpoint`` is false
    (default: the current time).

    Raises:
        ConfigError: anything wrong with the file, an override, or the resulting config.
    """
    return finish_config(read_config(path, overrides), now=now)


def finish_config(written: Config, *, now: datetime | None = None) -> Config:
    """Resolve and validate a config as read (``read_config``, ``config_from_dict``),
    stages included: what ``load_config`` checks after reading the file.

    Raises:
        ConfigError: anything wrong with the resulting config.
    """
    now = now or datetime.now()
    resolved = resolve(written, now=now)
    validate(resolved)
    if resolved.stages:
        expand_stages(resolved, now=now)  # a broken stage fails now, not hours into the run
    log_config_notes(written)  # older spellings and contradictions, one line each
    return resolved


def read_written(path: str | Path) -> dict[str, Any]:
    """The data of a config file as written: interpolations stay text (``"${oc.env:X}"``)
    and no file a key names is read. For a server that reads configs it was sent
    (Trinity Studio), where resolving would show this machine's environment and files.

    Raises:
        ConfigError: the file is missing, not YAML, or not a mapping.
    """
    data = OmegaConf.to_container(_load_yaml(Path(path)), resolve=False)
    assert isinstance(data, dict)
    return data


def read_config(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """The checked but unresolved config of a file; ``trainer_config_path`` and
    ``model.chat_template_path`` are read in."""
    path = Path(path)
    conf = _load_yaml(path)
    for override in overrides:
        _apply_override(conf, override)
    cfg = config_from_dict(_to_container(conf, Config))
    if cfg.trainer.trainer_config_path:
        cfg.trainer.trainer_config = _read_trainer_config(cfg, base_dir=path.parent)
        cfg.trainer.trainer_config_path = ""
    if cfg.model.chat_template_path:
        cfg.model.custom_chat_template = _read_chat_template(cfg, base_dir=path.parent)
        cfg.model.chat_template_path = None
    return cfg


def config_from_dict(data: Mapping[str, Any] | DictConfig) -> Config:
    """A checked, unresolved ``Config`` from plain data (what a YAML file holds).

    Raises:
        ConfigError: unknown keys, wrong types, bad choices, including inside ``stages``.
    """
    if isinstance(data, DictConfig):
        data = _to_container(data, Config)
    data = upstream_spellings(data)
    carried = take_other_kind_keys(data)  # a taskset's queue settings, a buffer's task settings
    cfg = build(Config, data)
    keep_other_kind_keys(cfg, carried)
    for index, stage in enumerate(cfg.stages):
        apply_stage(cfg, stage, index)  # checks the stage's keys against the schema
    return cfg


def to_dict(cfg: Config) -> dict[str, Any]:
    """Plain nested dicts of ``cfg``; ``config_from_dict(to_dict(cfg)) == cfg``."""
    return to_plain(cfg)


def to_yaml(cfg: Config) -> str:
    """``cfg`` as YAML text, keys in schema order."""
    return yaml.safe_dump(
        to_dict(cfg), sort_keys=False, default_flow_style=False, allow_unicode=True
    )


def _load_yaml(path: Path) -> DictConfig:
    if not path.is_file():
        raise ConfigError(
            "", "config file not found", value=str(path), valid="the path of a YAML file"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "", f"cannot parse {path}: not UTF-8 text (byte {exc.start})", valid="valid YAML"
        ) from exc
    except OSError as exc:
        raise ConfigError(
            "", f"cannot read {path}: {exc.strerror or _first_line(exc)}", valid="a readable file"
        ) from exc
    try:
        conf = OmegaConf.load(io.StringIO(text))
    # ValueError: an integer of more digits than Python converts (4300 by default)
    except (yaml.YAMLError, OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(
            "", f"cannot parse {path}: {_first_line(exc)}", valid="valid YAML"
        ) from exc
    except OSError:  # OmegaConf's answer to a document that is a single scalar
        conf = None
    if not isinstance(conf, DictConfig):
        raise ConfigError(
            "",
            f"{path} must hold a mapping at the top level",
            valid="keys such as project, name, model",
        )
    return conf


def _apply_override(conf: DictConfig, override: str) -> None:
    key, sep, text = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(
            key or override, "is not an override", value=override, valid=OVERRIDE_HELP
        )
    try:
        # YAML typing of the text (1e-5 is a float, [1, 2] a list); interpolations stay as written
        value = OmegaConf.to_container(OmegaConf.from_dotlist([f"value={text}"]))["value"]
        OmegaConf.update(conf, key, value, merge=True, force_add=True)
    except (yaml.YAMLError, OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(
            key, f"cannot apply override: {_first_line(exc)}", value=text, valid=OVERRIDE_HELP
        ) from exc


def _to_container(conf: DictConfig, schema: type) -> dict[str, Any]:
    """``conf`` as plain data with its interpolations resolved; an interpolation naming
    a key the file leaves out reads the key's default in ``schema`` (as Trinity-RFT
    reads its YAML over its schema's defaults), and the default stays out of the data."""
    raw = OmegaConf.to_container(conf, resolve=False)
    assert isinstance(raw, dict)
    added = fill_referenced_defaults(raw, schema)
    if added:
        conf = OmegaConf.create(raw)
    try:
        data = OmegaConf.to_container(conf, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as exc:
        raise ConfigError(
            str(exc.full_key), "is required but has no value", value="???", valid="a value"
        ) from exc
    except InterpolationResolutionError as exc:
        raise ConfigError(
            str(exc.full_key),
            f"cannot resolve interpolation: {_first_line(exc)}",
            valid="an existing key, or ${oc.env:VAR} of a set variable (or ${oc.env:VAR,default})",
        ) from exc
    assert isinstance(data, dict)
    for parents, key in added:
        _remove(data, parents, key)
    return data


def _remove(data: Any, parents: Sequence[str | int], key: str | int) -> None:
    for name in parents:
        data = data[name]
    del data[key]


def _read_chat_template(cfg: Config, *, base_dir: Path) -> str:
    """The text of ``model.chat_template_path`` (relative: to the config file, then cwd)."""
    given = cfg.model.chat_template_path or ""
    if cfg.model.custom_chat_template is not None:
        raise ConfigError(
            "model.chat_template_path",
            "is set together with model.custom_chat_template",
            value=given,
            valid="set only one of model.custom_chat_template and model.chat_template_path",
        )
    found = _find_file("model.chat_template_path", given, base_dir, "a Jinja chat template file")
    try:
        return found.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            "model.chat_template_path",
            f"cannot read {found}: {_first_line(exc)}",
            value=given,
            valid="a readable UTF-8 text file",
        ) from exc


def _find_file(key: str, given: str, base_dir: Path, kind: str) -> Path:
    """The file ``key`` names: ``given`` if absolute, else under ``base_dir`` (the config's
    folder), else under cwd; ``kind`` says what it should be when there is none."""
    candidates = [Path(given)] if Path(given).is_absolute() else [base_dir / given, Path(given)]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        raise ConfigError(key, "file not found", value=given, valid=f"the path of {kind}")
    return found


def _read_trainer_config(cfg: Config, *, base_dir: Path) -> VerlTrainerConfig:
    """The file named by ``trainer.trainer_config_path`` (relative: to the config file, then cwd)."""
    check_trainer_config_source(cfg.trainer)
    given = cfg.trainer.trainer_config_path
    found = _find_file("trainer.trainer_config_path", given, base_dir, "a YAML file")
    try:
        data = _to_container(_load_yaml(found), VerlTrainerConfig)
        return build(VerlTrainerConfig, data)  # paths relative to the file, prefixed below
    except ConfigError as err:
        inner = f"trainer.trainer_config.{err.path}" if err.path else "trainer.trainer_config_path"
        raise err.within(str(found), path=inner) from err


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
