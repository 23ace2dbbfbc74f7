"""service.data_juicer: the data pipelines with a real Data-Juicer service.

Each key through the real parts: ``auto_start`` and ``port`` start
``python -m trinity.service.data_juicer.server`` from the task pipeline, ``server_url``
sends an experience pipeline's rows to a server this module starts, and a URL where
nothing listens fails in one line naming the key. (Data-Juicer in the pipeline's own
process: tests/unit/pipeline/test_data_juicer.py.) The tests that run Data-Juicer need
the data_juicer extra (``pip install -e '.[data_juicer]'``, which ``make test``
installs).
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import torch

from trinity.config import ConfigError, read_config, resolve, validate
from trinity.config.schema import DataJuicerServiceConfig, ServiceConfig
from trinity.pipeline import ExperiencePipeline, TaskPipeline
from trinity.service.data_juicer import DataJuicerMissingError, DataJuicerServiceError
from trinity.service.data_juicer.client import PORT_LINE
from trinity.types import EID, Experience

HAVE_DJ = importlib.util.find_spec("data_juicer") is not None
needs_dj = pytest.mark.skipif(
    not HAVE_DJ,
    reason="Data-Juicer is not installed (pip install -e '.[data_juicer]')",
)
REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2025, 1, 1)
# one process per operator: these batches are tiny
QUESTION_FILTER = {"text_length_filter": {"min_len": 4, "text_key": "question", "num_proc": 1}}


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """A Data-Juicer service started as a user would, on a port it picks."""
    if not HAVE_DJ:
        pytest.skip("Data-Juicer is not installed (pip install -e '.[data_juicer]')")
    proc = subprocess.Popen(
        [sys.executable, "-m", "trinity.service.data_juicer.server", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once it listens
        assert line.startswith(PORT_LINE), line
        yield f"http://127.0.0.1:{int(line.split()[-1])}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
@needs_dj
def test_auto_start_serves_the_task_pipeline_and_stops_with_it() -> None:
    pipeline = TaskPipeline(
        [{"name": "data_juicer", "args": {"process": [QUESTION_FILTER]}}],
        DataJuicerServiceConfig(auto_start=True, port=0),
    )
    try:
        rows, metrics = pipeline.process(
            [{"question": "1+1", "answer": "2"}, {"question": "what is 12*12?", "answer": "144"}]
        )
        assert pipeline.data_juicer is not None
        url = pipeline.data_juicer.client().url
        assert httpx.get(f"{url}/health").json()["status"] == "ok"
    finally:
        pipeline.close()
    # "1+1" is shorter than min_len 4; Data-Juicer's statistics do not reach the taskset
    assert rows == [{"question": "what is 12*12?", "answer": "144"}]
    assert metrics == {"task_pipeline/input": 2.0, "task_pipeline/output": 1.0}
    # the pipeline's service is gone: nothing listens on its port any more
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health")


@pytest.mark.slow
@needs_dj
def test_auto_start_on_a_port_in_use_names_the_port(server_url: str) -> None:
    port = int(server_url.rsplit(":", 1)[1])
    with pytest.raises(DataJuicerServiceError) as caught:
        TaskPipeline(
            [{"name": "data_juicer", "args": {"process": [QUESTION_FILTER]}}],
            DataJuicerServiceConfig(auto_start=True, port=port),
        )
    message = str(caught.value)
    assert message.startswith(f"service.data_juicer.port={port}: ")
    assert "Address already in use" in message and "\n" not in message


@pytest.mark.slow
@needs_dj
def test_server_url_feeds_filter_stats_to_reward_shaping(server_url: str, tmp_path: Path) -> None:
    # the recipe file is read by the pipeline, which sends its operators to the service
    recipe = tmp_path / "dj.yaml"
    recipe.write_text(
        "process:\n  - text_length_filter:\n      min_len: 10\n      max_len: 100\n      num_proc: 1\n"
    )
    exps = [
        Experience(
            tokens=torch.tensor([1, 2, 3]),
            prompt_length=1,
            reward=1.0,
            eid=EID(task=i),
            prompt_text="q",
            response_text="x" * n,
        )
        for i, n in enumerate([3, 20, 50])
    ]
    pipeline = ExperiencePipeline(
        [
            {"name": "data_juicer", "args": {"config_path": str(recipe)}},
            {
                "name": "reward_shaping_mapper",
                "args": {
                    "reward_shaping_configs": [
                        {"stats_key": "text_len", "op_type": "ADD", "weight": 0.01}
                    ]
                },
            },
        ],
        data_juicer=DataJuicerServiceConfig(server_url=server_url),
    )
    try:
        out, metrics = pipeline.process(exps)
    finally:
        pipeline.close()
    # the 3-character response is filtered out; 1.0 + 0.01 * 20 = 1.2, 1.0 + 0.01 * 50 = 1.5
    assert [(e.eid.task, e.info["text_len"]) for e in out] == [(1, 20), (2, 50)]
    assert [e.reward for e in out] == pytest.approx([1.2, 1.5])
    assert metrics["data_juicer/dropped"] == 1.0
    # the service outlives a pipeline that only reached it
    assert httpx.get(f"{server_url}/health").status_code == 200


@needs_dj
def test_a_recipe_the_service_cannot_load_is_a_400_with_the_reason(server_url: str) -> None:
    response = httpx.post(
        f"{server_url}/process", json={"process": [{"no_such_op": {}}], "rows": [{"text": "x"}]}
    )
    assert response.status_code == 400
    assert "no_such_op" in response.json()["detail"]


def test_unreachable_server_url_fails_in_one_line_naming_it() -> None:
    # a bound socket that does not listen: connections to it are refused
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(DataJuicerServiceError) as caught:
            ExperiencePipeline(
                [{"name": "data_juicer", "args": {"process": [QUESTION_FILTER]}}],
                data_juicer=DataJuicerServiceConfig(server_url=url),
            )
    message = str(caught.value)
    assert message.startswith(f"service.data_juicer.server_url='{url}': ")
    assert "ConnectError" in message and "\n" not in message


@pytest.mark.skipif(HAVE_DJ, reason="Data-Juicer is installed")
def test_auto_start_without_the_extra_names_the_key_and_the_install() -> None:
    with pytest.raises(DataJuicerMissingError, match=r"service.data_juicer.auto_start=true .*"):
        TaskPipeline(
            [{"name": "data_juicer", "args": {"process": [QUESTION_FILTER]}}],
            DataJuicerServiceConfig(auto_start=True),
        )


def test_a_service_without_url_or_auto_start_is_a_config_error() -> None:
    base = read_config(REPO / "examples" / "arithmetic" / "grpo.yaml")

    def checked(service: DataJuicerServiceConfig) -> None:
        validate(resolve(replace(base, service=ServiceConfig(service)), now=NOW))

    with pytest.raises(ConfigError, match="service.data_juicer.server_url: .*auto_start"):
        checked(DataJuicerServiceConfig(port=5005))
    with pytest.raises(ConfigError, match="service.data_juicer.port: .*0..65535"):
        checked(DataJuicerServiceConfig(auto_start=True, port=70000))
    checked(DataJuicerServiceConfig(auto_start=True))
    checked(DataJuicerServiceConfig(server_url="http://127.0.0.1:5005"))
