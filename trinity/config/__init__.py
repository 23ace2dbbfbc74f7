"""Configuration: typed schema, YAML loading, derived values, validation, dry-run report.

    from trinity.config import load_config
    cfg = load_config("examples/grpo_gsm8k/gsm8k.yaml", ["algorithm.optimizer.lr=1e-5"])

``load_config`` = read YAML (OmegaConf interpolation) -> apply overrides -> strict
conversion to dataclasses -> ``resolve`` (pure derived values) -> ``validate``.
"""

from trinity.config.derived import job_dir, resolve
from trinity.config.errors import ConfigError
from trinity.config.loader import (
    config_from_dict,
    finish_config,
    load_config,
    read_config,
    read_written,
    to_dict,
    to_yaml,
)
from trinity.config.report import dry_run_report
from trinity.config.schema import *  # noqa: F403  (the section classes)
from trinity.config.schema import __all__ as _schema_all
from trinity.config.stages import expand_stages
from trinity.config.upstream.verl import trainer_settings
from trinity.config.validate import validate

__all__ = [
    "ConfigError",
    "config_from_dict",
    "dry_run_report",
    "expand_stages",
    "finish_config",
    "job_dir",
    "load_config",
    "read_config",
    "read_written",
    "resolve",
    "to_dict",
    "to_yaml",
    "trainer_settings",
    "validate",
    *_schema_all,
]
