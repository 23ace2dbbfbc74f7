"""Bad configs fail with one line naming the full key path and what would be valid."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from trinity.config import ConfigError, config_from_dict, load_config, resolve, validate

NOW = datetime(2024, 5, 6, 7, 8, 9)


def put(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set data[a][b][c] = value for dotted 'a.b.c', creating mappings on the way."""
    *parents, last = dotted.split(".")
    for key in parents:
        data = data.setdefault(key, {})
    data[last] = value


def setting(dotted: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: put(data, dotted, value)


def several(*edits: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def apply(data: dict[str, Any]) -> None:
        for edit in edits:
            edit(data)

    return apply


def drop_taskset(data: dict[str, Any]) -> None:
    del data["buffer"]["explorer_input"]["taskset"]


TASK = {"name": "tasks", "path": "/data/tasks"}

# (edit of the minimal config, key path in the error, words the message must contain)
BAD_CONFIGS = {
    "misspelt key": (
        setting("buffer.batch_szie", 32),
        "buffer.batch_szie",
        "did you mean 'batch_size'?",
    ),
    "unknown top-level key": (setting("projekt", "x"), "projekt", "valid top-level keys"),
    "string for an int": (
        setting("buffer.batch_size", "thirty"),
        "buffer.batch_size",
        "must be an integer",
    ),
    "fraction for an int": (
        setting("algorithm.repeat_times", 2.5),
        "algorithm.repeat_times",
        "an integer",
    ),
    # (a misspelt monitor_type fails at --dry-run instead: plugins may register monitors)
    "bad enum": (
        setting("synchronizer.sync_method", "ncll"),
        "synchronizer.sync_method",
        "did you mean 'nccl'?",
    ),
    "bad mode": (setting("mode", "deploy"), "mode", "both, train, explore, bench, serve"),
    # upstream's Megatron-LM trainer: only the data-parallel strategies exist here
    "megatron actor": (
        setting("trainer.trainer_config.actor_rollout_ref.actor.strategy", "megatron"),
        "trainer.trainer_config.actor_rollout_ref.actor.strategy",
        "(given: 'megatron'); valid: fsdp, fsdp2",
    ),
    "megatron critic": (
        setting("trainer.trainer_config.critic.strategy", "megatron"),
        "trainer.trainer_config.critic.strategy",
        "(given: 'megatron'); valid: fsdp, fsdp2",
    ),
    "unknown algorithm": (
        setting("algorithm.algorithm_type", "grpoo"),
        "algorithm.algorithm_type",
        "did you mean 'grpo'?",
    ),
    "grpo with one rollout": (
        setting("algorithm.repeat_times", 1),
        "algorithm.repeat_times",
        "grpo needs repeat_times > 1",
    ),
    "opmd with one rollout": (
        several(setting("algorithm.algorithm_type", "opmd"), setting("algorithm.repeat_times", 1)),
        "algorithm.repeat_times",
        "opmd needs repeat_times > 1",
    ),
    "response longer than model": (
        several(setting("model.max_model_len", 16), setting("model.max_prompt_tokens", None)),
        "model.max_response_tokens",
        "exceeds model.max_model_len (16)",
    ),
    "prompt + response longer than model": (
        setting("model.max_model_len", 90),
        "model.max_prompt_tokens",
        "(64 + 32) exceeds model.max_model_len (90)",
    ),
    "min response not below max": (
        setting("model.min_response_tokens", 32),
        "model.min_response_tokens",
        "must be below model.max_response_tokens (32)",
    ),
    "no way to know max_model_len": (
        setting("model.max_prompt_tokens", None),
        "model.max_model_len",
        "set model.max_model_len, or both",
    ),
    "zero batch size": (setting("buffer.batch_size", 0), "buffer.batch_size", "must be > 0"),
    "negative train batch size": (
        setting("buffer.train_batch_size", -8),
        "buffer.train_batch_size",
        "must be > 0",
    ),
    "negative sync offset": (
        setting("synchronizer.sync_offset", -1),
        "synchronizer.sync_offset",
        "must be >= 0",
    ),
    "zero sync interval": (
        setting("synchronizer.sync_interval", 0),
        "synchronizer.sync_interval",
        "must be >= 1",
    ),
    "mode both without taskset": (
        drop_taskset,
        "buffer.explorer_input.taskset",
        "mode both needs a taskset",
    ),
    "experience buffer without name": (
        several(
            setting("mode", "train"),
            setting("buffer.trainer_input.experience_buffer", {"path": "/data/sft"}),
        ),
        "buffer.trainer_input.experience_buffer.name",
        "is required in mode train",
    ),
    "zero eval interval": (
        setting("explorer.eval_interval", 0),
        "explorer.eval_interval",
        "must be >= 1",
    ),
    "unknown log level": (
        setting("log.level", "verbose"),
        "log.level",
        "DEBUG, INFO, WARNING, ERROR",
    ),
    "bad key inside a list item": (
        setting("buffer.explorer_input.eval_tasksets", [{"nmae": "eval", "path": "/data/eval"}]),
        "buffer.explorer_input.eval_tasksets[0].nmae",
        "did you mean 'name'?",
    ),
    "not a boolean": (
        setting("explorer.eval_on_startup", "maybe"),
        "explorer.eval_on_startup",
        "true or false",
    ),
    "scalar for a list": (
        setting("data_processor.task_pipeline", {"inputs": "/data/raw.jsonl"}),
        "data_processor.task_pipeline.inputs",
        "must be a list",
    ),
    "duplicate storage name": (
        setting("buffer.explorer_input.eval_tasksets", [dict(TASK), dict(TASK)]),
        "buffer.explorer_input.eval_tasksets[1].name",
        "is already used by buffer.explorer_input.eval_tasksets[0]",
    ),
    "file taskset without path": (
        setting("buffer.explorer_input.taskset", {"name": "tasks"}),
        "buffer.explorer_input.tasksets[0].path",
        "is required for storage_type file",
    ),
    "more engines than GPUs": (
        several(
            setting("cluster.gpu_per_node", 2), setting("explorer.rollout_model.engine_num", 2)
        ),
        "explorer.rollout_model.engine_num",
        "the trainer needs at least one",
    ),
    "top_p of zero": (
        setting("buffer.explorer_input.taskset.rollout_args", {"top_p": 0}),
        "buffer.explorer_input.tasksets[0].rollout_args.top_p",
        "must lie in (0, 1]",
    ),
    "gpu memory above one": (
        setting("explorer.rollout_model.gpu_memory_utilization", 1.5),
        "explorer.rollout_model.gpu_memory_utilization",
        "(0, 1]",
    ),
    "an OpenAI queue of no rows": (
        setting("explorer.rollout_model.openai_api_max_queued_rows", 0),
        "explorer.rollout_model.openai_api_max_queued_rows",
        "must be >= 1",
    ),
    "mix without expert data": (
        setting("algorithm.algorithm_type", "mix"),
        "buffer.trainer_input.auxiliary_buffers",
        "mix needs an expert dataset",
    ),
    "both trainer_config and its path": (
        several(
            setting("trainer.trainer_config", {}),
            setting("trainer.trainer_config_path", "verl.yaml"),
        ),
        "trainer.trainer_config_path",
        "set only one of trainer.trainer_config and trainer.trainer_config_path",
    ),
    "resume_path without a path": (
        setting("trainer.trainer_config", {"trainer": {"resume_mode": "resume_path"}}),
        "trainer.trainer_config.trainer.resume_from_path",
        "is required when resume_mode is resume_path",
    ),
    "bad choice in a nested list": (
        setting(
            "trainer.trainer_config",
            {
                "actor_rollout_ref": {
                    "actor": {"checkpoint": {"save_contents": ["model", "optimiser"]}}
                }
            },
        ),
        "trainer.trainer_config.actor_rollout_ref.actor.checkpoint.save_contents[1]",
        "did you mean 'optimizer'?",
    ),
    "misspelt key in a stage": (
        setting("stages", [{"stage_name": "warmup", "buffer": {"batch_szie": 4}}]),
        "stages[0].buffer.batch_szie",
        "did you mean 'batch_size'?",
    ),
    "duplicate stage names": (
        setting("stages", [{"stage_name": "a"}, {"stage_name": "a"}]),
        "stages[1].stage_name",
        "is used by an earlier stage",
    ),
    "auxiliary model without weights": (
        setting("explorer.auxiliary_models", [{"engine_num": 1}]),
        "explorer.auxiliary_models[0].model_path",
        "is required",
    ),
}


def check(data: dict[str, Any]) -> None:
    validate(resolve(config_from_dict(data), now=NOW))


def assert_good_error(err: ConfigError, path: str, words: str) -> None:
    message = str(err)
    assert err.path == path
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    assert words in message
    assert err.valid and err.valid in message  # says what would be valid


@pytest.mark.parametrize("edit, path, words", list(BAD_CONFIGS.values()), ids=list(BAD_CONFIGS))
def test_bad_config(
    minimal: dict[str, Any], edit: Callable[[dict[str, Any]], None], path: str, words: str
) -> None:
    data = copy.deepcopy(minimal)
    check(data)  # the unedited config is fine, so the edit is what fails
    edit(data)
    with pytest.raises(ConfigError) as info:
        check(data)
    assert_good_error(info.value, path, words)


def test_misspelt_key_message_lists_valid_keys(minimal: dict[str, Any]) -> None:
    put(minimal, "buffer.batch_szie", 32)
    with pytest.raises(ConfigError) as info:
        check(minimal)
    assert str(info.value).startswith(
        "buffer.batch_szie: unknown key (given: 32); valid keys of buffer: batch_size, train_batch_size, "
    )
    assert info.value.value == 32
    assert info.value.suggestion == "batch_size"


def test_missing_env_var_names_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRINITY_TEST_UNSET_VAR", raising=False)
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  model_path: ${oc.env:TRINITY_TEST_UNSET_VAR}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, now=NOW)
    assert_good_error(info.value, "model.model_path", "TRINITY_TEST_UNSET_VAR")


def test_override_without_equals_sign(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("project: p\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, ["buffer.batch_size"], now=NOW)
    assert_good_error(info.value, "buffer.batch_size", "is not an override")


def test_yaml_syntax_error_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  model_path: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, now=NOW)
    assert "\n" not in str(info.value) and "cannot parse" in str(info.value)


def test_unknown_part_name(minimal: dict[str, Any]) -> None:
    put(minimal, "algorithm.advantage_fn", "grpo_typo")
    with pytest.raises(ConfigError) as info:
        check(minimal)
    assert_good_error(info.value, "algorithm.advantage_fn", "unknown advantage_fn")


def test_misspelt_part_argument(minimal: dict[str, Any]) -> None:
    put(minimal, "algorithm.kl_loss_fn_args", {"kl_cof": 0.1})
    with pytest.raises(ConfigError) as info:
        check(minimal)
    assert_good_error(info.value, "algorithm.kl_loss_fn_args", "kl_cof")
    assert "kl_coef" in str(info.value)


def _builtin_parts() -> dict[Any, set[str]]:
    """Each registry of the algorithm's parts and the names it holds of built-in parts."""
    from trinity.algorithm import registries
    from trinity.config.algorithm_defaults import PART_KINDS
    from trinity.utils.registry import Registry

    kinds = set(PART_KINDS.values())
    return {
        registry: {
            # plugins loaded by other tests may have added parts of their own modules
            name
            for name in registry.names()
            if registry.get(name).__module__.startswith("trinity.algorithm")
        }
        for registry in vars(registries).values()
        if isinstance(registry, Registry) and registry.kind in kinds
    }


def test_builtin_part_names_are_what_the_registries_hold() -> None:
    from trinity.config.algorithm_defaults import BUILTIN_PART_NAMES

    for registry, builtin in _builtin_parts().items():
        assert builtin == BUILTIN_PART_NAMES[registry.kind], registry.kind


def test_builtin_part_args_are_the_parts_own_args() -> None:
    from trinity.config.part_args import BUILTIN_PART_ARGS

    for registry, builtin in _builtin_parts().items():
        table = BUILTIN_PART_ARGS[registry.kind]
        for name in builtin | set(table):
            part_args = getattr(registry.get(name), "Args", None)
            assert part_args is table.get(name, "missing"), (registry.kind, name)


VALIDATE_IN_A_FRESH_INTERPRETER = """
import sys
from datetime import datetime
from trinity.config import config_from_dict, resolve, validate
cfg = resolve(config_from_dict({config!r}), now=datetime(2025, 1, 1))
try:
    validate(cfg)
    print("valid")
except Exception as exc:
    print(type(exc).__name__, exc)
print("torch imported:", "torch" in sys.modules)
"""


def validate_in_a_fresh_interpreter(config: dict[str, Any]) -> str:
    """What VALIDATE_IN_A_FRESH_INTERPRETER prints for ``config``."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", VALIDATE_IN_A_FRESH_INTERPRETER.format(config=config)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.parametrize(
    ("change", "expect_valid", "expect_torch"),
    [
        ({}, True, False),  # built-in parts: no import of the algorithm package
        ({"algorithm.advantage_fn": "grpo_typo"}, False, True),  # checked against the registry
        # a part given by a dotted path, as a plugin's would be, is looked up in the registry
        (
            {"algorithm.policy_loss_fn": "trinity.algorithm.policy_loss.ppo.PPOPolicyLoss"},
            True,
            True,
        ),
        # built-in parts' arguments are built from the torch-free Args
        ({"algorithm.kl_loss_fn_args": {"kl_cof": 0.1}}, False, False),
        ({"algorithm.policy_loss_fn_args": {"clip_range": 0.3}}, True, False),
    ],
)
def test_validation_imports_torch_only_when_a_part_needs_it(
    minimal: dict[str, Any], change: dict[str, Any], expect_valid: bool, expect_torch: bool
) -> None:
    for key, value in change.items():
        put(minimal, key, value)
    out = validate_in_a_fresh_interpreter(minimal)
    assert out.startswith("valid") == expect_valid, out
    assert f"torch imported: {expect_torch}" in out, out


@pytest.mark.parametrize(
    "args",
    [{"kl_cof": 0.1}, {"kl_coef": "high"}, {"kl_coef": -1.0}],
    ids=["unknown name", "wrong type", "out of range"],
)
def test_builtin_part_args_fail_as_they_do_against_the_registry(
    minimal: dict[str, Any], args: dict[str, Any]
) -> None:
    """Checked without torch, a built-in part's arguments fail with the registry's error."""
    import trinity.algorithm  # noqa: F401  (this process checks against the registries)

    put(minimal, "algorithm.kl_loss_fn_args", args)
    with pytest.raises(ConfigError) as info:
        check(minimal)
    out = validate_in_a_fresh_interpreter(minimal)
    assert out.splitlines() == [f"ConfigError {info.value}", "torch imported: False"], out
