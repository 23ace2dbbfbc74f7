"""A run's experience database lives in its job directory, where ``trinity view --db
<job dir>`` finds it: the demo config resolved, its buffer written through the real
queue and its SQLite backup, then read back by the view command."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import pytest
import torch

from trinity.buffer import make_experience_buffer
from trinity.cli.view import main as view_main
from trinity.config import job_dir, load_config
from trinity.config.errors import ConfigError
from trinity.types import EID, Experience

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "examples" / "arithmetic" / "grpo.yaml"


def demo_config(root: Path, *overrides: str, now: datetime = datetime(2026, 1, 2, 3, 4, 5)):
    return load_config(DEMO, [f"checkpoint_root_dir={root}", *overrides], now=now)


def experiences(n: int) -> list[Experience]:
    return [
        Experience(
            tokens=torch.tensor([1, 2, 3, 40 + i]),
            prompt_length=3,
            logprobs=torch.tensor([math.log(0.5)]),
            action_mask=torch.tensor([True]),
            reward=float(i),
            eid=EID(batch=1, task=i, run=0),
            prompt_text=f"what is {i} + {i}?",
            response_text=f"{2 * i}",
        )
        for i in range(n)
    ]


def test_the_demo_buffer_is_written_into_its_job_dir_and_viewed_from_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = demo_config(tmp_path)
    storage = config.buffer.trainer_input.experience_buffer
    run_dir = job_dir(config)
    assert Path(storage.path) == run_dir / "buffer" / "arithmetic_buffer.db"

    buffer = make_experience_buffer(storage)  # the queue, backed up to its SQLite file
    buffer.put(experiences(3))
    buffer.close()

    assert view_main(["view", "--db", str(run_dir), "--print", "--limit", "5"]) == 0
    out = capsys.readouterr().out
    assert "arithmetic_buffer.db" in out
    assert "what is 2 + 2?" in out
    assert "what is 3 + 3?" not in out  # only the three experiences written


def test_two_runs_of_the_demo_keep_their_experiences_apart(tmp_path: Path) -> None:
    first = demo_config(tmp_path, now=datetime(2026, 1, 2, 3, 4, 5))
    second = demo_config(tmp_path, now=datetime(2026, 1, 2, 3, 4, 6))
    paths = {c.buffer.trainer_input.experience_buffer.path for c in (first, second)}
    assert len(paths) == 2


def test_a_path_the_config_names_is_kept(tmp_path: Path) -> None:
    given = str(tmp_path / "elsewhere" / "mine.db")
    config = demo_config(tmp_path, f"buffer.trainer_input.experience_buffer.path={given}")
    assert config.buffer.trainer_input.experience_buffer.path == given


def test_a_train_mode_dataset_gets_no_default_path(tmp_path: Path) -> None:
    # mode train reads the buffer as a dataset, which a fresh job dir never holds
    with pytest.raises(ConfigError) as err:
        demo_config(
            tmp_path, "mode=train", "buffer.trainer_input.experience_buffer.storage_type=sql"
        )
    assert err.value.path == "buffer.trainer_input.experience_buffer.path"
