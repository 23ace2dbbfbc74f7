"""``trinity view``: the text mode through a pipe and the web page through a real HTTP client."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from trinity.buffer import JsonlWriter, SQLExperienceStorage
from trinity.cli.view import main as view_main
from trinity.types import EID, Experience
from trinity.view import ExperienceSource

REPO_ROOT = Path(__file__).resolve().parents[3]


def run_experiences() -> list[Experience]:
    return [
        Experience(
            tokens=torch.tensor([1, 2, 3, 9000 + i, 9100 + i]),
            prompt_length=3,
            logprobs=torch.tensor([math.log(0.5), -0.125]),
            action_mask=torch.tensor([True, i != 1]),
            reward=float(i),
            eid=EID(batch=4, task=i, run=0),
            info={"model_version": 10 + i},
            metrics={"accuracy": float(i % 2)},
            prompt_text=f"what is {i} + {i}?",
            response_text=f"<answer>{2 * i}</answer>",
        )
        for i in range(3)
    ]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "job" / "buffer" / "experience.db"
    storage = SQLExperienceStorage(str(path))
    storage.write(run_experiences())
    storage.close()
    return path


def trinity_view(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "trinity.cli.view", "view", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        **kwargs,
    )


def test_print_mode_writes_a_page_to_a_pipe(db: Path) -> None:
    proc = trinity_view("--db", str(db), "--print", "--offset", "1", "--limit", "5")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines()[0] == f"{db}: experiences 1-2 of 3"
    assert "#1  eid 4/1/0/0  model_version 11  reward 1.000  mean logprob -0.409" in out
    # tokens as ids (no tokenizer) with logprobs; ln 0.5 = -0.69; * marks the untrained one
    assert "'<9001>'(-0.69) '<9101>'(-0.12)*" in out
    assert "what is 2 + 2?" in out and "<answer>4</answer>" in out
    assert "what is 0 + 0?" not in out  # before the offset


def test_job_dir_jsonl_and_missing_path(
    tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert view_main(["view", "--db", str(db.parent.parent), "--print", "--limit", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"{db}: experiences 0-0 of 3")
    exps = tmp_path / "exps.jsonl"
    with JsonlWriter(exps) as writer:
        writer.write(run_experiences())
    assert view_main(["view", "--db", str(exps), "--print", "--offset", "2"]) == 0
    assert "#2  eid 4/2/0/0  model_version 12  reward 2.000" in capsys.readouterr().out
    assert view_main(["view", "--db", str(tmp_path / "nothing.db"), "--print"]) == 1
    assert "no database at" in capsys.readouterr().err
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "a.jsonl").touch()
    (tmp_path / "two" / "b.db").touch()
    assert view_main(["view", "--db", str(tmp_path / "two"), "--print"]) == 1
    assert "several experience files" in capsys.readouterr().err


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_web_page_serves_list_detail_and_json(db: Path) -> None:
    proc = trinity_view("--db", str(db), "--port", "0", "--limit", "2")
    try:
        assert proc.stdout is not None
        assert "3 experiences" in proc.stdout.readline()
        line = proc.stdout.readline()
        url = line.split("open ")[1].split(" ")[0]
        base = url.split("/?")[0]
        assert base.startswith("http://127.0.0.1:")

        status, page = get(url)
        assert status == 200
        assert "3 experiences, showing 0-1" in page and "what is 1 + 1?" in page
        assert "what is 2 + 2?" not in page and "offset=2" in page  # next page link

        status, page = get(f"{base}/experience/1")
        assert status == 200
        assert "model_version 11" in page and "reward 1.000" in page
        assert "&lt;answer&gt;2&lt;/answer&gt;" in page  # escaped
        # token 9001 with p = exp(ln 0.5) = 0.5 is shaded halfway, hue 60
        assert "hsl(60, 70%, 80%)" in page and "logprob -0.6931 | p 0.5000" in page
        assert "class='tok untrained'" in page

        status, body = get(f"{base}/api/experiences?offset=2&limit=5")
        data = json.loads(body)
        assert status == 200 and data["total"] == 3
        [exp] = data["experiences"]
        assert exp["reward"] == 2.0 and exp["model_version"] == 12
        assert [t["id"] for t in exp["tokens"]] == [9002, 9102]
        assert exp["tokens"][1]["logprob"] == -0.125

        assert get(f"{base}/experience/7")[0] == 404
        assert get(f"{base}/?offset=-1")[0] == 400
        assert get(f"{base}/api/experiences?limit=many")[0] == 400
        assert get(f"{base}/?limit=501")[0] == 400  # above MAX_LIMIT
        assert get(f"{base}/experience/one")[0] == 404
        assert get(f"{base}/nothing")[0] == 404
    finally:
        proc.send_signal(signal.SIGINT)
        stopped(proc)
    assert proc.returncode == 0


def test_sigterm_stops_the_server_cleanly(db: Path) -> None:
    proc = trinity_view("--db", str(db), "--port", "0")
    assert proc.stdout is not None
    proc.stdout.readline()
    url = proc.stdout.readline().split("open ")[1].split(" ")[0]
    assert get(url)[0] == 200
    proc.send_signal(signal.SIGTERM)
    stopped(proc)
    assert proc.returncode == 0


def stopped(proc: subprocess.Popen, timeout: float = 60) -> None:
    """Wait for ``proc``; if it hangs, fail with every thread's stack (faulthandler)."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"trinity view did not stop within {timeout} s; its stacks:\n{err}")


def test_token_texts_from_a_decoder(db: Path) -> None:
    source = ExperienceSource(str(db), decode=lambda ids: [f"t{i - 9000}" for i in ids])
    [view] = source.page(2, 1)
    assert [(t.text, t.trained) for t in view.tokens] == [("t2", True), ("t102", True)]
    assert view.mean_logprob == pytest.approx((math.log(0.5) - 0.125) / 2)
    source.close()


def test_server_binds_to_loopback_only(db: Path) -> None:
    from trinity.view.server import bind

    sock = bind(port=0)
    assert sock.getsockname()[0] == "127.0.0.1" and sock.getsockname()[1] > 0
    sock.close()
    assert os.path.exists(db)
