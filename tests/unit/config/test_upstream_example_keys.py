"""Keys and interpolations of Trinity-RFT's example configs that load here with upstream's
meaning: ``explorer.runner_num`` (older spelling), an actor optimizer in the veRL layout
beside ``algorithm.optimizer``, ``model.chat_template_path``, veRL's
``trainer.val_before_train``, and ``${...}`` naming keys the file leaves out."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_testing import run_cli
from config_testing import minimal_config

from trinity.config import ConfigError, expand_stages, load_config, read_config
from trinity.config.no_effect import set_without_effect


def _write(tmp_path: Path, data: dict[str, Any], text: str = "") -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data) + text)
    return path


def _notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "trinity.config"]


# explorer.runner_num


@pytest.mark.parametrize(
    ("runner_num", "engines", "per_model"), [(64, 2, 32), (10, 4, 3), (4, 8, 1)]
)
def test_runner_num_is_a_total_over_the_engines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, runner_num: int, engines: int, per_model: int
) -> None:
    data = minimal_config(tmp_path)
    data["explorer"] = {"runner_num": runner_num, "rollout_model": {"engine_num": engines}}
    with caplog.at_level(logging.WARNING, logger="trinity.config"):
        cfg = load_config(_write(tmp_path, data))
    assert cfg.explorer.runner_per_model == per_model
    [note] = _notes(caplog)
    assert "explorer.runner_num" in note and "explorer.runner_per_model" in note
    assert f"runner_per_model: {per_model}" in note


def test_runner_per_model_wins_over_runner_num(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = minimal_config(tmp_path)
    data["explorer"] = {"runner_num": 64, "runner_per_model": 4}
    with caplog.at_level(logging.WARNING, logger="trinity.config"):
        cfg = load_config(_write(tmp_path, data))
    assert cfg.explorer.runner_per_model == 4
    [note] = _notes(caplog)
    assert "explorer.runner_per_model" in note and "ignored" in note


def test_a_stage_runner_num_counts_over_the_inherited_engines(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["explorer"] = {"rollout_model": {"engine_num": 2}}
    data["stages"] = [{"stage_name": "one", "explorer": {"runner_num": 12}}]
    [stage] = expand_stages(load_config(_write(tmp_path, data)), now=datetime(2024, 1, 1))
    assert stage.explorer.runner_per_model == 6


def test_runner_num_below_one_names_the_key(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["explorer"] = {"runner_num": 0}
    with pytest.raises(ConfigError, match=r"^explorer\.runner_num: must be >= 1"):
        load_config(_write(tmp_path, data))


# the actor optimizer in two places


def test_algorithm_optimizer_wins_over_the_verl_actor_optimizer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = minimal_config(tmp_path)
    data["algorithm"]["optimizer"] = {"lr": 2e-6}
    data["trainer"] = {"trainer_config": {"actor_rollout_ref": {"actor": {"optim": {"lr": 1e-5}}}}}
    with caplog.at_level(logging.WARNING, logger="trinity.config"):
        cfg = load_config(_write(tmp_path, data))
    assert cfg.trainer.trainer_config.actor_rollout_ref.actor.optim.lr == 2e-6
    [note] = _notes(caplog)
    assert "\n" not in note
    assert "trainer.trainer_config.actor_rollout_ref.actor.optim.lr (1e-05)" in note
    assert "algorithm.optimizer.lr (2e-06)" in note


def test_an_actor_optimizer_that_restates_algorithm_optimizer_logs_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = minimal_config(tmp_path)
    data["algorithm"]["optimizer"] = {"lr": 1e-5, "weight_decay": 0.1}
    # fields the veRL layout leaves at their defaults are not compared
    data["trainer"] = {"trainer_config": {"actor_rollout_ref": {"actor": {"optim": {"lr": 1e-5}}}}}
    with caplog.at_level(logging.WARNING, logger="trinity.config"):
        cfg = load_config(_write(tmp_path, data))
    assert cfg.trainer.trainer_config.actor_rollout_ref.actor.optim.weight_decay == 0.1
    assert _notes(caplog) == []


# model.chat_template_path

TEMPLATE = "{% for m in messages %}<<{{ m['role'] }}>>{{ m['content'] }}\n{% endfor %}"


def test_chat_template_path_reaches_every_user_of_the_template(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "chat.j2").write_text(TEMPLATE)
    data = minimal_config(tmp_path)
    data["model"]["chat_template_path"] = "templates/chat.j2"  # relative to the config file
    data["buffer"]["explorer_input"]["eval_tasksets"] = [{"name": "ev", "path": "/data/ev"}]
    data["buffer"]["trainer_input"]["auxiliary_buffers"] = {"sft": {"path": "/data/sft"}}
    path = _write(tmp_path, data)
    assert read_config(path).model.custom_chat_template == TEMPLATE
    cfg = load_config(path)
    buffer = cfg.buffer
    storages = [
        *buffer.explorer_input.tasksets,
        *buffer.explorer_input.eval_tasksets,
        buffer.trainer_input.experience_buffer,
        buffer.trainer_input.auxiliary_buffers["sft"],
    ]
    # the rollout engines and their OpenAI endpoint, and every dataset the trainer formats
    assert cfg.explorer.rollout_model.chat_template == TEMPLATE
    assert [s.format.chat_template for s in storages] == [TEMPLATE] * len(storages)


def test_rollout_engines_render_with_the_template_file(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from trinity.explorer.engines import RolloutEngines

    (tmp_path / "chat.j2").write_text(TEMPLATE)
    data = minimal_config(tmp_path)
    data["model"]["model_path"] = str(tiny_model_dir)
    data["model"]["chat_template_path"] = "chat.j2"
    cfg = load_config(_write(tmp_path, data))
    rollout = cfg.explorer.rollout_model
    engines = RolloutEngines.for_model(
        cfg, rollout, str(tiny_model_dir), "explorer.rollout_model", None
    )
    try:  # the engine that workflows call and the OpenAI endpoint serves
        engine = engines.engines[0]
        ids = engine.apply_chat_template([{"role": "user", "content": "hi"}])
        assert engine.tokenizer.decode(ids) == "<<user>>hi\n"
    finally:
        engines.close()


def test_chat_template_path_and_custom_chat_template_are_one_setting(tmp_path: Path) -> None:
    (tmp_path / "chat.j2").write_text(TEMPLATE)
    data = minimal_config(tmp_path)
    data["model"]["chat_template_path"] = "chat.j2"
    data["model"]["custom_chat_template"] = TEMPLATE
    with pytest.raises(ConfigError, match=r"^model\.chat_template_path: is set together"):
        load_config(_write(tmp_path, data))


def test_missing_chat_template_file_fails_the_dry_run_on_one_line(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["model"]["chat_template_path"] = "no/such/template.j2"
    result = run_cli("run", "--config", str(_write(tmp_path, data)), "--dry-run")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("trinity: config error: model.chat_template_path: file not found")
    assert "no/such/template.j2" in line


# trainer.val_before_train


def test_val_before_train_is_accepted_and_reported_as_without_effect(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["trainer"] = {"trainer_config": {"trainer": {"val_before_train": True}}}
    found = dict(set_without_effect(read_config(_write(tmp_path, data))))
    why = found["trainer.trainer_config.trainer.val_before_train"]
    assert "explorer.eval_on_startup" in why
    data["trainer"]["trainer_config"]["trainer"]["val_before_train"] = False  # the default
    assert set_without_effect(read_config(_write(tmp_path, data))) == []


# interpolations naming keys the file leaves out


def test_interpolations_read_defaults_of_keys_the_file_leaves_out(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["buffer"]["explorer_input"]["eval_tasksets"] = [{"name": "ev", "path": "/data/ev"}]
    text = (
        "trainer:\n"
        "  trainer_config:\n"
        "    critic:\n"
        "      ppo_epochs: ${trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs}\n"
        "      ppo_micro_batch_size_per_gpu: 3\n"
        "      forward_micro_batch_size_per_gpu: "
        "${trainer.trainer_config.critic.ppo_micro_batch_size_per_gpu}\n"
        "explorer:\n"
        "  runner_per_model: ${algorithm.repeat_times}\n"
        "  eval_interval: ${synchronizer.sync_interval}\n"
    )
    cfg = load_config(_write(tmp_path, data, text))
    critic = cfg.trainer.trainer_config.critic
    assert (critic.ppo_epochs, critic.forward_micro_batch_size_per_gpu) == (1, 3)
    assert cfg.explorer.runner_per_model == 4  # algorithm.repeat_times, written in the file
    assert cfg.explorer.eval_interval == 1  # synchronizer.sync_interval's default
    # the defaults read stay out of the config as written
    written = read_config(_write(tmp_path, data, text))
    assert written.trainer.trainer_config.actor_rollout_ref.actor.optim is None


def test_a_default_read_by_interpolation_does_not_create_its_section(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    text = "explorer:\n  max_retry_times: ${trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs}\n"
    cfg = read_config(_write(tmp_path, data, text))
    assert cfg.explorer.max_retry_times == 1
    assert cfg.trainer.trainer_config is None  # no trainer_config written, none created


@pytest.mark.parametrize(
    ("reference", "problem"),
    [
        ("data.train_batch_size", "is not a key here"),
        ("trainer.trainer_config.actor_rollout_ref.actor.no_such_key", "is not a key here"),
        ("model.max_model_len", "is not in the file and has no fixed default"),
    ],
)
def test_an_interpolation_of_a_key_without_value_here_names_it(
    tmp_path: Path, reference: str, problem: str
) -> None:
    data = minimal_config(tmp_path)
    del data["model"]["max_prompt_tokens"]
    text = f"explorer:\n  max_retry_times: ${{{reference}}}\n"
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, data, text))
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(
        f"explorer.max_retry_times: cannot resolve interpolation ${{{reference}}}"
    )
    assert f"{reference} {problem}" in line


def test_an_upstream_shaped_config_passes_the_dry_run(tmp_path: Path) -> None:
    (tmp_path / "chat.j2").write_text(TEMPLATE)
    data = minimal_config(tmp_path)
    (tmp_path / "tasks.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')
    data["buffer"]["explorer_input"]["taskset"]["path"] = str(tmp_path / "tasks.jsonl")
    data["algorithm"] = {"algorithm_type": "ppo", "repeat_times": 4}
    data["model"]["chat_template_path"] = str(tmp_path / "chat.j2")
    data["explorer"] = {"runner_num": 12, "rollout_model": {"engine_num": 2}}
    text = (
        "trainer:\n"
        "  trainer_config:\n"
        "    actor_rollout_ref:\n"
        "      actor:\n"
        "        optim:\n"
        "          lr: 1e-5\n"
        "    critic:\n"
        "      ppo_epochs: ${trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs}\n"
        "    trainer:\n"
        "      val_before_train: true\n"
    )
    result = run_cli("run", "--config", str(_write(tmp_path, data, text)), "--dry-run")
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "trinity.config" in line]
    assert len(notes) == 2  # runner_num read as runner_per_model, the actor's lr not used
    assert "runner_per_model: 6" in notes[0] and "optim.lr (1e-05)" in notes[1]
    assert "runner_per_model: 6" in result.stdout
    assert "trainer.trainer_config.trainer.val_before_train (" in result.stdout
