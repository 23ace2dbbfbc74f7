"""Fixtures: the tiny model behind a ModelWrapper and the real RunnerPool over it."""

from __future__ import annotations

from pathlib import Path

import pytest
from workflow_testing import make_pool

from trinity.rollout.engine import TransformersEngine
from trinity.rollout.wrapper import ModelWrapper

MAX_MODEL_LEN = 512


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with TransformersEngine(
        str(tiny_model_dir), dtype="float32", max_model_len=MAX_MODEL_LEN, seed=1
    ) as eng:
        yield eng


@pytest.fixture(scope="module")
def model(engine) -> ModelWrapper:
    return ModelWrapper(engine)


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runner_logs")


@pytest.fixture(scope="module")
def pool(model, log_dir):
    runners = make_pool(model, log_dir)
    yield runners
    runners.close()
