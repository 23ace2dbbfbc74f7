"""service.data_juicer: the data pipelines with a real Data-Juicer service.

Each key through the real parts: ``auto_start`` and ``port`` start
``python -m trinity.service.data_juicer.server`` from the task pipeline, ``server_url``
and ``token`` send an experience pipeline's rows to a server this module starts, and a
URL where nothing listens fails in one line naming the key. The server answers only
requests with its token and a loopback Host, runs only its allowlist of operators unless
``allow_code_operators`` says otherwise, and answers bad operator arguments with a 4xx
naming the operator. (Data-Juicer in the pipeline's own
process: tests/unit/pipeline/test_data_juicer.py.) The tests that run Data-Juicer need
the data_juicer extra (``pip install -e '.[data_juicer]'``, which ``make test``
installs).
"""

from __future__ import annotations

import importlib.util
import os
import secrets
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
from trinity.service.data_juicer import (
    DataJuicerMissingError,
    DataJuicerService,
    DataJuicerServiceError,
)
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
TOKEN_ENV = "TRINITY_DATA_JUICER_TOKEN"
TOKEN = secrets.token_urlsafe(16)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# a recipe's first request loads its operators (seconds; more on a busy machine), past
# httpx's default of 5 s
REQUEST_TIMEOUT = 120
# a lambda that writes the id of the service's user into the file {}
RUN_ID = "lambda s: __import__('os').system('id > {}') or s"


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """A Data-Juicer service started as a user would, on a port it picks."""
    if not HAVE_DJ:
        pytest.skip("Data-Juicer is not installed (pip install -e '.[data_juicer]')")
    proc = subprocess.Popen(
        [sys.executable, "-m", "trinity.service.data_juicer.server", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, TOKEN_ENV: TOKEN},
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
        client = pipeline.data_juicer.client()
        url = client.url
        # the service's own token, made by the pipeline; no request gets in without it
        token = client.token
        assert token
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{url}/health", headers=auth).json()["status"] == "ok"
        assert httpx.get(f"{url}/health").status_code == 401
        # handed over outside the command line, which any user sees in ps
        assert not [cmd for cmd in _command_lines() if token in cmd]
        # the default allowlist holds for the service the pipeline started
        with pytest.raises(DataJuicerServiceError, match=r"403: .*python_lambda_mapper.*"):
            client.process([{"python_lambda_mapper": {"lambda_str": "lambda s: s"}}], rows)
    finally:
        pipeline.close()
    # "1+1" is shorter than min_len 4; Data-Juicer's statistics do not reach the taskset
    assert rows == [{"question": "what is 12*12?", "answer": "144"}]
    assert metrics == {"task_pipeline/input": 2.0, "task_pipeline/output": 1.0}
    # the pipeline's service is gone: nothing listens on its port any more
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health")


def _command_lines() -> list[str]:
    """The command line of every process of this machine, as ps shows them."""
    lines = []
    for entry in Path("/proc").iterdir():
        try:
            lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, NotADirectoryError):
            continue
    return lines


@pytest.mark.slow
@needs_dj
def test_allow_code_operators_lets_the_auto_started_service_run_a_lambda() -> None:
    service = DataJuicerService(
        DataJuicerServiceConfig(auto_start=True, port=0, allow_code_operators=True)
    )
    try:
        lam = "lambda s: {**s, 'text': s['text'].upper()}"
        rows = service.client().process(
            [{"python_lambda_mapper": {"lambda_str": lam, "num_proc": 1}}], [{"text": "ab"}]
        )
    finally:
        service.close()
    assert rows == [{"text": "AB"}]


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
        data_juicer=DataJuicerServiceConfig(server_url=server_url, token=TOKEN),
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
    assert httpx.get(f"{server_url}/health", headers=AUTH).status_code == 200


@needs_dj
def test_a_recipe_the_service_cannot_load_is_a_400_with_the_reason(server_url: str) -> None:
    response = httpx.post(
        f"{server_url}/process",
        headers=AUTH,
        json={"process": [{"no_such_op": {}}], "rows": [{"text": "x"}]},
        timeout=REQUEST_TIMEOUT,
    )
    assert response.status_code == 400
    assert "no_such_op" in response.json()["detail"]


def _post(url: str, process: list, headers: dict | None = None) -> httpx.Response:
    rows = [{"text": "some text", "question": "what is 12*12?"}]
    return httpx.post(
        f"{url}/process",
        headers=AUTH if headers is None else headers,
        json={"process": process, "rows": rows},
        timeout=REQUEST_TIMEOUT,
    )


@needs_dj
@pytest.mark.parametrize(
    "make_process, refused",
    [
        (
            lambda f: [{"python_lambda_mapper": {"lambda_str": RUN_ID.format(f)}}],
            "python_lambda_mapper",
        ),
        (lambda f: [{"python_file_mapper": {"file_path": f"{f}.py"}}], "python_file_mapper"),
        (
            lambda f: [{"image_ohem_selector": {"score_file": f"{f}.py", "topk": 1}}],
            "image_ohem_selector",
        ),
        # an allowed operator with an argument that runs code or writes a file
        (
            lambda f: [
                {
                    "remove_repeat_sentences_mapper": {
                        "tokenizer": f"lambda t: __import__('os').system('id > {f}') or [t]"
                    }
                }
            ],
            "remove_repeat_sentences_mapper",
        ),
        (
            lambda f: [{"text_length_filter": {"min_len": 1, "stats_export_path": str(f)}}],
            "text_length_filter",
        ),
        # one allowed operator first does not let a second one in
        (
            lambda f: [
                QUESTION_FILTER,
                {"python_lambda_mapper": {"lambda_str": RUN_ID.format(f)}},
            ],
            "python_lambda_mapper",
        ),
    ],
)
def test_an_operator_outside_the_allowlist_is_refused_and_runs_nothing(
    server_url: str, tmp_path: Path, make_process, refused: str
) -> None:
    marker = tmp_path / "ran"
    code = tmp_path / "ran.py"
    code.write_text(
        f"import os\nos.system('id > {marker}')\ndef process_single(s):\n    return s\n"
    )
    response = _post(server_url, make_process(marker))
    assert response.status_code == 403, response.text
    detail = response.json()["detail"]
    assert refused in detail and "service.data_juicer.allow_code_operators" in detail
    assert "\n" not in detail
    assert not marker.exists()


@needs_dj
def test_requests_without_the_service_token_are_401(server_url: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        health = httpx.get(f"{server_url}/health", headers=headers)
        assert health.status_code == 401
        assert "TRINITY_DATA_JUICER_TOKEN" in health.json()["detail"]
        assert _post(server_url, [QUESTION_FILTER], headers=headers).status_code == 401
    assert httpx.get(f"{server_url}/health", headers=AUTH).status_code == 200
    assert _post(server_url, [QUESTION_FILTER]).status_code == 200


@needs_dj
def test_a_foreign_host_header_is_refused(server_url: str) -> None:
    # what a browser sends after DNS rebinding points evil.example at 127.0.0.1
    response = httpx.get(f"{server_url}/health", headers={**AUTH, "Host": "evil.example"})
    assert response.status_code == 400
    assert "evil.example" in response.text
    response = _post(server_url, [QUESTION_FILTER], headers={**AUTH, "Host": "evil.example"})
    assert response.status_code == 400
    # the loopback's names are served
    response = httpx.get(f"{server_url}/health", headers={**AUTH, "Host": "localhost:1234"})
    assert response.status_code == 200


@needs_dj
@pytest.mark.parametrize(
    "args, named",
    [
        ({"min_len": "ten"}, "min_len"),  # not an int
        ({"min_lenn": 3}, "min_lenn"),  # no such argument: Data-Juicer would ignore it
        ({"text_key": 3}, "text_key"),
        ({"min_len": 3, "text_key": "no_such_field"}, "no_such_field"),  # fails on the rows
    ],
)
def test_bad_operator_arguments_are_a_4xx_naming_the_operator(
    server_url: str, args: dict, named: str
) -> None:
    response = _post(server_url, [{"text_length_filter": {**args, "num_proc": 1}}])
    assert response.status_code in (400, 422), response.text
    detail = response.json()["detail"]
    assert "text_length_filter" in detail and named in detail and "\n" not in detail


@needs_dj
def test_a_constrained_argument_out_of_range_is_a_422(server_url: str) -> None:
    # rep_len: Annotated[int, Gt(0)]; Data-Juicer itself would keep no rows
    response = _post(server_url, [{"character_repetition_filter": {"rep_len": 0}}])
    assert response.status_code == 422, response.text
    assert "character_repetition_filter" in response.json()["detail"]


@needs_dj
def test_a_wrong_token_fails_at_connect_naming_the_key(server_url: str) -> None:
    with pytest.raises(DataJuicerServiceError) as caught:
        ExperiencePipeline(
            [{"name": "data_juicer", "args": {"process": [QUESTION_FILTER]}}],
            data_juicer=DataJuicerServiceConfig(server_url=server_url, token="wrong"),
        )
    message = str(caught.value)
    assert "401" in message and "service.data_juicer.token" in message and "\n" not in message


def test_the_server_does_not_start_without_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    out = subprocess.run(
        [sys.executable, "-m", "trinity.service.data_juicer.server", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and out.stdout == ""
    assert out.stderr.startswith(f"{TOKEN_ENV} is not set: ")


def test_server_url_without_a_token_names_the_key_and_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(DataJuicerServiceError) as caught:
        ExperiencePipeline(
            [{"name": "data_juicer", "args": {"process": [QUESTION_FILTER]}}],
            data_juicer=DataJuicerServiceConfig(server_url="http://127.0.0.1:9"),
        )
    message = str(caught.value)
    assert message.startswith("service.data_juicer.token: ")
    assert TOKEN_ENV in message and "\n" not in message


def test_unreachable_server_url_fails_in_one_line_naming_it() -> None:
    # a bound socket that does not listen: connections to it are refused
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(DataJuicerServiceError) as caught:
            ExperiencePipeline(
                [{"name": "data_juicer", "args": {"process": [QUESTION_FILTER]}}],
                data_juicer=DataJuicerServiceConfig(server_url=url, token="t"),
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
