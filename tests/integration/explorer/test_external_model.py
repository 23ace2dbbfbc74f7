"""``model.external_model``: an OpenAI-compatible endpoint as the rollout model.

The endpoint is our own server (real uvicorn on loopback, in front of the tiny model),
reached only through OpenAI's API with the ``openai`` client, as a hosted one would be.
"""

from __future__ import annotations

import pytest
from behaviour_workflow import write_tasks

from trinity.config import ConfigError
from trinity.explorer.bench import Bench
from trinity.explorer.engines import RolloutEngines
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.external import ExternalModelError, OpenAIEngine
from trinity.rollout.server import OpenAIServer
from trinity.rollout.wrapper import ModelWrapper

NAME = "hosted-model"
KEY = "sk-external"


@pytest.fixture(scope="module")
def local(tiny_model_dir):
    with TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=256) as engine:
        yield engine


@pytest.fixture(scope="module")
def endpoint(local):
    """(server, the wrapper behind it, recording every request)."""
    served = ModelWrapper(local, enable_history=True, name=NAME)
    with OpenAIServer({NAME: served}, api_key=KEY) as server:
        yield server, served


@pytest.fixture
def env(endpoint, monkeypatch):
    server, served = endpoint
    served.clear_history()
    monkeypatch.setenv("EXT_URL", server.base_url)
    monkeypatch.setenv("EXT_KEY", KEY)
    return served


def test_engine_replies_as_the_served_model(env, local, tiny_model_dir):
    engine = OpenAIEngine.from_env("EXT_URL", "EXT_KEY", NAME, str(tiny_model_dir))
    assert engine.max_model_len == 256  # read from the endpoint's /models
    messages = [{"role": "user", "content": "What is 4 + 4?"}]
    args = {"temperature": 0.0, "max_tokens": 12, "seed": 1}
    [remote] = ModelWrapper(engine).chat(messages, **args)
    [direct] = ModelWrapper(local).chat(messages, **args)
    assert remote.response_text == direct.response_text
    assert remote.prompt_text == direct.prompt_text
    assert len(env.history) == 1  # one request reached the endpoint
    engine.close()


def test_missing_environment_variable_is_named(tiny_model_dir, monkeypatch):
    monkeypatch.delenv("NO_SUCH_URL", raising=False)
    with pytest.raises(ExternalModelError, match=r"\$NO_SUCH_URL"):
        OpenAIEngine.from_env("NO_SUCH_URL", "EXT_KEY", NAME, str(tiny_model_dir))


def _config(tiny_model_dir, tmp_path, *overrides):
    from behaviour_workflow import behaviour_config

    data = tmp_path / "data"
    write_tasks(data, "train", ["ok"] * 2)
    write_tasks(data, "test", ["ok"] * 3)
    return behaviour_config(
        tiny_model_dir,
        tmp_path,
        data,
        "name=ext",
        "model.external_model.enable=true",
        "model.external_model.base_url_env=EXT_URL",
        "model.external_model.api_key_env=EXT_KEY",
        f"model.external_model.model_name={NAME}",
        "buffer.explorer_input.eval_tasksets[0].repeat_times=2",
        *overrides,
    )


class _Rows:
    def __init__(self) -> None:
        self.logged: list[tuple[int, dict]] = []

    def log(self, metrics: dict, step: int) -> None:
        self.logged.append((step, metrics))


def test_bench_evaluates_the_external_endpoint(env, tiny_model_dir, tmp_path):
    config = _config(tiny_model_dir, tmp_path, "mode=bench")
    engines = RolloutEngines.from_config(config, str(tiny_model_dir))
    assert [type(e) for e in engines.engines] == [OpenAIEngine]
    engines.close()
    monitor = _Rows()
    bench = Bench(config, tmp_path / "job", str(tiny_model_dir), monitor)
    try:
        rows = bench.run()
    finally:
        bench.close()
    assert list(rows) == [0] and [step for step, _ in monitor.logged] == [0]
    # every eval rollout was sampled by the endpoint: 3 tasks x 2 repeats
    assert len(env.history) == 6


def test_training_modes_refuse_an_external_model(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="model.external_model.enable"):
        _config(tiny_model_dir, tmp_path, "mode=both")
