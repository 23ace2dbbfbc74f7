"""Trinity-RFT spellings: the task_selector section, sync_style fully_async, and the
serve proxy's keys, each read with upstream's meaning or refused saying what to write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from config_testing import minimal_config, resolved_config

from trinity.config import ConfigError, config_from_dict
from trinity.config.no_effect import set_without_effect

DIFFICULTY = {
    "selector_type": "difficulty_based",
    "feature_keys": ["qwen2.5_7b_pass_rate"],
    "kwargs": {"target_reward": 0.5, "tau": 0},
}


def test_a_task_selector_section_is_the_data_selector(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["buffer"]["explorer_input"]["taskset"]["task_selector"] = dict(DIFFICULTY)
    data["buffer"]["explorer_input"]["eval_tasksets"] = [
        {"name": "ev", "path": "/data/ev", "task_selector": {"selector_type": "shuffle"}}
    ]
    cfg = resolved_config(data)
    taskset = cfg.buffer.explorer_input.taskset
    assert taskset.data_selector.selector_type == "difficulty_based"
    assert taskset.data_selector.feature_keys == ["qwen2.5_7b_pass_rate"]
    # as for data_selector: the explorer's reader draws by difficulty, the others at random
    assert taskset.task_selector == "random"
    assert cfg.buffer.explorer_input.eval_tasksets[0].task_selector == "shuffle"
    # the file's mapping is not changed by reading it
    assert data["buffer"]["explorer_input"]["taskset"]["task_selector"] == DIFFICULTY


def test_a_task_selector_section_in_a_stage(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    taskset = {"name": "tasks", "path": "/data/tasks", "task_selector": {"selector_type": "random"}}
    data["stages"] = [{"stage_name": "s", "buffer": {"explorer_input": {"taskset": taskset}}}]
    stage = config_from_dict(data).stages[0]
    assert stage.buffer["explorer_input"]["taskset"]["data_selector"] == {"selector_type": "random"}


def test_the_plain_task_selector_name_is_kept(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["buffer"]["explorer_input"]["taskset"]["task_selector"] = "shuffle"
    assert resolved_config(data).buffer.explorer_input.taskset.task_selector == "shuffle"


def test_two_selector_sections_fail_naming_the_key(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    taskset = data["buffer"]["explorer_input"]["taskset"]
    taskset["task_selector"] = {"selector_type": "shuffle"}
    taskset["data_selector"] = {"selector_type": "random"}
    with pytest.raises(ConfigError, match=r"buffer\.explorer_input\.taskset\.task_selector"):
        config_from_dict(data)


def test_fully_async_is_a_sync_style(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["synchronizer"] = {"sync_style": "fully_async"}
    data["explorer"] = {"max_inflight_batches": 3}
    cfg = resolved_config(data)
    assert cfg.synchronizer.sync_style == "fully_async"
    assert cfg.explorer.max_inflight_batches == 3


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("explorer", {"max_inflight_batches": 0}, "explorer.max_inflight_batches"),
        ("algorithm", {"dynamic_sampling": {"enable": True}}, "algorithm.dynamic_sampling"),
    ],
)
def test_fully_async_refuses_what_it_cannot_run(
    tmp_path: Path, key: str, value: dict[str, Any], named: str
) -> None:
    data = minimal_config(tmp_path)
    data["synchronizer"] = {"sync_style": "fully_async"}
    data.setdefault(key, {}).update(value)
    with pytest.raises(ConfigError) as err:
        resolved_config(data)
    line = str(err.value)
    assert "\n" not in line and named in line


def _serve(tmp_path: Path, explorer: dict[str, Any], rollout: dict[str, Any] | None = None):
    data = minimal_config(tmp_path)
    data["mode"] = "serve"
    # a queue would have no reader in mode serve: a file the trainer of another run reads
    data["buffer"]["trainer_input"]["experience_buffer"]["storage_type"] = "file"
    data["buffer"]["trainer_input"]["experience_buffer"]["path"] = str(tmp_path / "exp.jsonl")
    data["explorer"] = {**explorer, "rollout_model": rollout or {}}
    return data


@pytest.mark.parametrize("key", ["proxy_port", "api_port"])
def test_serve_proxy_keys_set_the_endpoint(tmp_path: Path, key: str) -> None:
    cfg = resolved_config(_serve(tmp_path, {key: 8010, "listen_address": "0.0.0.0"}))
    rollout = cfg.explorer.rollout_model
    assert (rollout.openai_api_host, rollout.openai_api_port) == ("0.0.0.0", 8010)


def test_serve_proxy_keys_wait_for_mode_serve(tmp_path: Path) -> None:
    data = _serve(tmp_path, {"proxy_port": 8010})
    data["mode"] = "both"
    assert resolved_config(data).explorer.rollout_model.openai_api_port == 0


@pytest.mark.parametrize(
    ("explorer", "rollout", "key"),
    [
        ({"proxy_port": 8010}, {"openai_api_port": 9000}, "explorer.proxy_port"),
        ({"proxy_port": 8010, "api_port": 8011}, {}, "explorer.api_port"),
        ({"listen_address": "0.0.0.0"}, {"openai_api_host": "10.0.0.1"}, "explorer.listen_address"),
    ],
)
def test_serve_proxy_keys_that_contradict_the_rollout_model_fail(
    tmp_path: Path, explorer: dict[str, Any], rollout: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        resolved_config(_serve(tmp_path, explorer, rollout))


def test_serve_proxy_keys_without_an_equivalent_are_reported(tmp_path: Path) -> None:
    explorer = {"service_status_check_interval": 30, "min_running_model_num": 2, "db_url": "x"}
    found = [key for key, _ in set_without_effect(config_from_dict(_serve(tmp_path, explorer)))]
    assert found == [
        "explorer.service_status_check_interval",
        "explorer.min_running_model_num",
        "explorer.db_url",
    ]
