"""load_config: YAML, interpolation, command-line overrides, strict types, YAML output."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
import yaml

from trinity.config import ConfigError, config_from_dict, load_config, read_config, to_yaml

EXAMPLES = Path(__file__).parent / "examples"
NOW = datetime(2024, 5, 6, 7, 8, 9)


def test_overrides_on_the_command_line_form(env: dict[str, str]) -> None:
    cfg = load_config(
        EXAMPLES / "gsm8k.yaml",
        [
            "algorithm.optimizer.lr=2e-6",
            "buffer.batch_size=16",
            "buffer.explorer_input.eval_tasksets[0].repeat_times=4",
            "trainer.grad_clip=0.5",  # not in the file: added
            "model.critic_model_path=${model.model_path}",
            "monitor.monitor_args={project: demo}",
        ],
        now=NOW,
    )
    assert cfg.algorithm.optimizer.lr == 2e-6
    assert cfg.buffer.train_batch_size == 128  # 16 tasks x 8 rollouts
    assert cfg.buffer.explorer_input.eval_tasksets[0].repeat_times == 4
    assert cfg.trainer.trainer_config.actor_rollout_ref.actor.grad_clip == 0.5
    assert cfg.model.critic_model_path == env["TRINITY_MODEL_PATH"]
    assert cfg.monitor.monitor_args == {"project": "demo"}


def test_override_with_a_misspelt_key_names_it(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(EXAMPLES / "gsm8k.yaml", ["buffer.batch_szie=16"], now=NOW)
    assert info.value.path == "buffer.batch_szie" and info.value.suggestion == "batch_size"


def test_env_interpolation_with_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "model:\n"
        "  model_path: ${oc.env:TRINITY_TEST_MODEL,builtin-model}\n"
        "  max_model_len: ${oc.env:TRINITY_TEST_LEN,512}\n"  # env values are strings: coerced
        "  max_response_tokens: 128\n"
        "buffer:\n"
        "  explorer_input:\n"
        "    taskset: {name: t, path: /data/t}\n"
        "  trainer_input:\n"
        "    experience_buffer: {name: e}\n"
    )
    monkeypatch.delenv("TRINITY_TEST_MODEL", raising=False)
    monkeypatch.delenv("TRINITY_TEST_LEN", raising=False)
    cfg = load_config(path, now=NOW)
    assert (cfg.model.model_path, cfg.model.max_model_len) == ("builtin-model", 512)
    monkeypatch.setenv("TRINITY_TEST_MODEL", "/models/mine")
    monkeypatch.setenv("TRINITY_TEST_LEN", "1024")
    cfg = load_config(path, now=NOW)
    assert (cfg.model.model_path, cfg.model.max_model_len) == ("/models/mine", 1024)
    assert cfg.model.max_prompt_tokens == 896  # 1024 - 128


def test_strings_holding_numbers_and_booleans_are_coerced() -> None:
    # YAML 1.1 reads 1e-5 as a string; environment variables are always strings
    cfg = config_from_dict(
        {
            "algorithm": {"optimizer": {"lr": "1e-5", "betas": ["0.9", "0.95"]}},
            "buffer": {"batch_size": "32", "total_steps": "1e3"},
            "explorer": {"eval_on_startup": "false"},
        }
    )
    assert cfg.algorithm.optimizer.lr == 1e-5
    assert cfg.algorithm.optimizer.betas == [0.9, 0.95]
    assert (cfg.buffer.batch_size, cfg.buffer.total_steps) == (32, 1000)
    assert cfg.explorer.eval_on_startup is False
    # an int in a float field becomes a float; a float with no fraction fits an int field
    cfg = config_from_dict({"model": {"temperature": 1, "max_model_len": 2048.0}})
    assert isinstance(cfg.model.temperature, float) and cfg.model.max_model_len == 2048


def test_yaml_output_loads_back_to_the_same_config(env: dict[str, str], tmp_path: Path) -> None:
    cfg = load_config(EXAMPLES / "config_guide.yaml", now=NOW)
    text = to_yaml(cfg)
    assert config_from_dict(yaml.safe_load(text)) == cfg
    assert text.splitlines()[0] == "project: Trinity-RFT"  # schema order


def test_read_config_is_unresolved(env: dict[str, str]) -> None:
    cfg = read_config(EXAMPLES / "gsm8k.yaml")
    assert cfg.buffer.train_batch_size is None and cfg.ray_namespace is None


def test_trainer_config_path_is_relative_to_the_config_file(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not the examples directory
    cfg = load_config(EXAMPLES / "verl_trainer_config_path.yaml", now=NOW)
    assert cfg.trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4


def test_error_inside_the_trainer_config_file(tmp_path: Path) -> None:
    (tmp_path / "verl.yaml").write_text(
        "actor_rollout_ref:\n  actor:\n    ppo_micro_batch_sise_per_gpu: 4\n"
    )
    (tmp_path / "run.yaml").write_text("trainer:\n  trainer_config_path: verl.yaml\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "run.yaml", now=NOW)
    assert (
        info.value.path
        == "trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_sise_per_gpu"
    )
    assert "verl.yaml" in str(info.value) and "ppo_micro_batch_size_per_gpu" in str(info.value)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config("/nonexistent/run.yaml", now=NOW)


def test_an_empty_section_means_its_defaults() -> None:
    cfg = config_from_dict({"monitor": None, "log": {}})
    assert cfg.monitor.monitor_type == "tensorboard" and cfg.log.level == "INFO"
