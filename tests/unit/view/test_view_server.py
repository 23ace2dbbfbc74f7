"""The viewer's web server, served by uvicorn on 127.0.0.1 and asked with httpx: a
foreign Host, rows that are not experiences, and offsets past every table."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from view_testing import experiences, write_jsonl

from trinity.buffer import SQLExperienceStorage
from trinity.view import ExperienceSource
from trinity.view.server import bind, create_app


@contextlib.contextmanager
def serving(source: ExperienceSource) -> Iterator[str]:
    """The viewer's app on a free port of 127.0.0.1, in a thread; yields its base URL."""
    sock = bind(port=0)
    server = uvicorn.Server(uvicorn.Config(create_app(source), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "the viewer did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Four experiences; row id 3 holds JSON that is not JSON in its ``info`` column."""
    path = tmp_path / "buffer.db"
    storage = SQLExperienceStorage(str(path))
    storage.write(experiences(4))
    storage.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE experience SET info = '{not json' WHERE id = 3")
    return path


def test_a_foreign_host_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "exps.jsonl"
    write_jsonl(path, experiences(2))
    source = ExperienceSource(str(path))
    with serving(source) as base, httpx.Client(base_url=base) as client:
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"Host": "localhost:8765"}).status_code == 200
        refused = client.get("/api/experiences", headers={"Host": "evil.example"})
        assert refused.status_code == 400
        assert "invalid Host header 'evil.example'" in refused.text
        assert "what is" not in refused.text
    source.close()


def test_a_malformed_row_is_a_notice_not_a_500(db: Path) -> None:
    source = ExperienceSource(str(db))
    with serving(source) as base, httpx.Client(base_url=base) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert "what is 3 + 3?" in page.text  # the rows after the bad one are shown
        assert "row id 3: not a stored experience (JSONDecodeError" in page.text

        detail = client.get("/experience/2")
        assert detail.status_code == 422
        assert "row id 3: not a stored experience" in detail.text
        assert "/experience/3" in detail.text  # the way on to the next row

        data = client.get("/api/experiences").json()
        assert [e["index"] for e in data["experiences"]] == [0, 1, 3]
        [problem] = data["malformed"]
        assert problem["index"] == 2 and "row id 3" in problem["error"]
    source.close()


def test_offsets_past_every_table_are_answered(db: Path) -> None:
    source = ExperienceSource(str(db))
    huge = str(10**30)
    with serving(source) as base, httpx.Client(base_url=base) as client:
        page = client.get("/", params={"offset": huge})
        assert page.status_code == 400
        assert "offset" in page.text and huge in page.text
        assert client.get("/", params={"offset": 2**63 - 1}).status_code == 200
        assert client.get("/api/experiences", params={"offset": huge}).status_code == 400
        assert client.get("/api/experiences", params={"offset": -1}).status_code == 400
        assert client.get(f"/experience/{huge}").status_code == 404
        assert client.get("/experience/-1").status_code == 404
        assert client.get("/experience/4").status_code == 404
    source.close()


def test_a_malformed_jsonl_line_is_a_notice(tmp_path: Path) -> None:
    path = tmp_path / "exps.jsonl"
    write_jsonl(path, experiences(1))
    with open(path, "a") as f:
        f.write("{not json\n")
    write_jsonl(path, experiences(1, start=1))
    source = ExperienceSource(str(path))
    with serving(source) as base, httpx.Client(base_url=base) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert "line 2: not a stored experience" in page.text and "what is 1 + 1?" in page.text
        assert client.get("/experience/1").status_code == 422
        data = json.loads(client.get("/api/experiences").text)
        assert data["total"] == 3 and [e["index"] for e in data["experiences"]] == [0, 2]
