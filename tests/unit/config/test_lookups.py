"""``check_lookups``: every name and data path a run looks up fails at ``--dry-run``."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from trinity.config import ConfigError, config_from_dict, resolve
from trinity.config.lookups import BUILTIN_NAMES, REGISTRIES, check_lookups

NOW = datetime(2024, 5, 6, 7, 8, 9)
REPO = Path(__file__).resolve().parents[3]


def check(data: dict[str, Any]) -> None:
    check_lookups(resolve(config_from_dict(data), now=NOW), now=NOW)


def failure(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        check(data)
    return caught.value


def test_builtin_names_are_the_registries_names() -> None:
    import importlib

    for kind, (module, attr) in REGISTRIES.items():
        registry = getattr(importlib.import_module(module), attr)
        # names that trinity's own modules register (other tests of the same process
        # register their own workflows and rewards)
        builtin = {n for n in registry.names() if registry.get(n).__module__.startswith("trinity.")}
        assert BUILTIN_NAMES[kind] == builtin, kind


def test_a_config_of_builtin_names_and_existing_paths_passes(data: dict[str, Any]) -> None:
    data["buffer"]["default_workflow_type"] = "math_boxed_workflow"
    data["buffer"]["default_reward_fn_type"] = "math_boxed_reward"
    check(data)


def test_an_unknown_workflow_names_the_key_and_the_valid_names(data: dict[str, Any]) -> None:
    data["buffer"]["default_workflow_type"] = "alfwrld_workflow"
    err = failure(data)
    assert err.path == "buffer.default_workflow_type"
    assert err.value == "alfwrld_workflow"
    assert "unknown workflow" in str(err) and "math_workflow" in err.valid
    assert "\n" not in str(err)


def test_a_taskset_of_the_list_is_named_by_its_index(data: dict[str, Any]) -> None:
    ei = data["buffer"]["explorer_input"]
    second = {**ei["taskset"], "name": "more", "default_reward_fn_type": "math_rewrd"}
    ei["tasksets"] = [ei.pop("taskset"), second]
    err = failure(data)
    assert err.path == "buffer.explorer_input.tasksets[1].default_reward_fn_type"
    assert err.suggestion == "math_reward"


def test_eval_workflow_and_operators_are_checked(data: dict[str, Any]) -> None:
    ei = data["buffer"]["explorer_input"]
    ei["default_eval_workflow_type"] = "no_such_eval"
    assert failure(data).path == "buffer.explorer_input.default_eval_workflow_type"
    del ei["default_eval_workflow_type"]
    data["data_processor"] = {
        "experience_pipeline": {"operators": [{"name": "reward_shaping_mapper"}, {"name": "x"}]}
    }
    err = failure(data)
    assert err.path == "data_processor.experience_pipeline.operators[1].name"
    assert "unknown experience operator" in str(err)


def test_a_task_pipeline_checks_its_operators_and_inputs_not_the_taskset_path(
    data: dict[str, Any], tmp_path: Path
) -> None:
    data["buffer"]["explorer_input"]["taskset"]["path"] = str(tmp_path / "written_by_pipeline")
    data["data_processor"] = {
        "task_pipeline": {"operators": [{"name": "dedupe"}], "inputs": [str(tmp_path / "raw")]}
    }
    err = failure(data)
    assert err.path == "data_processor.task_pipeline.inputs[0]"
    (tmp_path / "raw").write_text("{}\n")
    check(data)
    data["data_processor"]["task_pipeline"]["operators"] = [{"name": "llm_difficulty_filter"}]
    assert failure(data).path == "data_processor.task_pipeline.operators[0].name"


def test_a_dotted_path_must_import(data: dict[str, Any]) -> None:
    data["buffer"]["default_workflow_type"] = "trinity.workflows.math_workflow.MathWorkflow"
    check(data)
    data["buffer"]["default_workflow_type"] = "trinity.workflows.math_workflow.Nothing"
    err = failure(data)
    assert "cannot import workflow (AttributeError:" in str(err)
    data["buffer"]["default_workflow_type"] = "no_such_package.Flow"
    assert "ModuleNotFoundError" in str(failure(data))


def test_a_name_a_plugin_registers_passes(data: dict[str, Any], tmp_path: Path) -> None:
    from trinity.launch.run import load_plugins

    plugins = tmp_path / "plugins"
    plugins.mkdir()
    name = f"plugin_reward_{tmp_path.name}"  # unique: the registry outlives the test
    (plugins / f"{name}.py").write_text(
        "from trinity.rewards.registry import REWARD_FNS\n\n"
        f"@REWARD_FNS.register('{name}')\n"
        "def reward(response, truth):\n"
        "    return {'accuracy': 1.0}\n"
    )
    data["buffer"]["default_reward_fn_type"] = name
    assert failure(data).path == "buffer.default_reward_fn_type"
    load_plugins([plugins])
    check(data)


def test_a_missing_data_path_fails_saying_what_to_do(data: dict[str, Any], tmp_path: Path) -> None:
    data["buffer"]["explorer_input"]["taskset"]["path"] = str(tmp_path / "nope.jsonl")
    err = failure(data)
    assert err.path == "buffer.explorer_input.tasksets[0].path"
    assert "no such file or directory" in str(err) and "existing data file" in err.valid


def test_a_hub_id_says_datasets_are_not_downloaded(data: dict[str, Any]) -> None:
    data["buffer"]["explorer_input"]["taskset"]["path"] = "openai/gsm8k"
    err = failure(data)
    assert "never downloaded from a hub" in str(err)
    assert "huggingface-cli download --repo-type dataset openai/gsm8k" in err.valid


def test_eval_and_auxiliary_datasets_are_checked(data: dict[str, Any], tmp_path: Path) -> None:
    ei = data["buffer"]["explorer_input"]
    ei["eval_tasksets"] = [{"name": "ev", "path": str(tmp_path / "eval_missing")}]
    assert failure(data).path == "buffer.explorer_input.eval_tasksets[0].path"
    ei["eval_tasksets"] = []
    data["buffer"]["trainer_input"]["auxiliary_buffers"] = {
        "sft_dataset": {"path": str(tmp_path / "sft_missing")}
    }
    assert failure(data).path == "buffer.trainer_input.auxiliary_buffers.sft_dataset.path"


def test_mode_train_reads_no_taskset_but_its_dataset(data: dict[str, Any], tmp_path: Path) -> None:
    data["mode"] = "train"
    data["algorithm"] = {"algorithm_type": "sft"}
    data["buffer"]["explorer_input"]["taskset"]["path"] = str(tmp_path / "unused")
    data["buffer"]["explorer_input"]["default_workflow_type"] = "unused_workflow"
    data["buffer"]["trainer_input"]["experience_buffer"]["path"] = str(tmp_path / "sft")
    assert failure(data).path == "buffer.trainer_input.experience_buffer.path"
    (tmp_path / "sft").mkdir()
    check(data)


def test_a_stage_error_names_its_stage(data: dict[str, Any], tmp_path: Path) -> None:
    data["stages"] = [
        {"stage_name": "warmup", "buffer": {"default_workflow_type": "nope_workflow"}},
    ]
    err = failure(data)
    assert err.path == "buffer.default_workflow_type"
    assert "stage 'warmup'" in str(err)


def _run_dry(tmp_path: Path, data: dict[str, Any], *overrides: str) -> subprocess.CompletedProcess:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "trinity", "run", "--config", str(path), "--dry-run", *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dry_run_fails_on_an_unknown_workflow_in_one_line(
    data: dict[str, Any], tmp_path: Path
) -> None:
    done = _run_dry(tmp_path, data, "buffer.default_workflow_type=alfwrld_workflow")
    assert done.returncode == 2, done.stdout
    [line] = done.stderr.splitlines()
    assert line.startswith("trinity: config error: buffer.default_workflow_type: unknown workflow")
    assert "math_workflow" in line


def test_dry_run_lists_the_keys_without_effect_it_sets(
    data: dict[str, Any], tmp_path: Path
) -> None:
    done = _run_dry(
        tmp_path,
        data,
        "trainer.trainer_config.actor_rollout_ref.actor.fsdp_config.forward_prefetch=true",
    )
    assert done.returncode == 0, done.stderr
    assert "# Keys without effect" in done.stdout
    assert (
        "accepted, no effect here: "
        "trainer.trainer_config.actor_rollout_ref.actor.fsdp_config.forward_prefetch (GPU-only"
    ) in done.stdout


def test_resume_from_path_must_be_a_checkpoint_of_this_run(
    data: dict[str, Any], tmp_path: Path
) -> None:
    data["trainer"] = {
        "trainer_config": {
            "trainer": {"resume_mode": "resume_path", "resume_from_path": str(tmp_path / "x")}
        }
    }
    err = failure(data)
    assert err.path == "trainer.trainer_config.trainer.resume_from_path"
    assert "global_step_<N> directory of this run's job dir" in err.valid
