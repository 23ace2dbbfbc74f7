"""Trinity-RFT's vision-language examples (grpo_vlm, mix_vlm; adapted copies in
upstream_vlm/) pass ``trinity run --dry-run`` against local data whose rows hold images,
and a row whose image cannot be read fails the dry run in one line naming row and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vlm_testing import png_data_url, squares_image

from trinity.cli.main import main

CONFIGS = Path(__file__).parent / "upstream_vlm"


def _write(path: Path, rows: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def env(tmp_path: Path, tiny_idefics3_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    image = png_data_url(squares_image(2))
    taskset = _write(
        tmp_path / "geometry3k", [{"problem": "How many?", "answer": "2", "images": [image]}]
    )
    sft = _write(
        tmp_path / "geometry_sft",
        [{"problem": "How many?", "response": "\\boxed{2}", "images": [image]}],
    )
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(tiny_idefics3_dir))
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(taskset))
    monkeypatch.setenv("TRINITY_SFT_DATASET_PATH", str(sft))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.chdir(CONFIGS)  # grpo_vlm's trainer_config_path is relative
    return taskset


@pytest.mark.parametrize("name", ["grpo_vlm", "mix_vlm"])
def test_upstream_vlm_example_passes_dry_run(name: str, env: Path, capsys) -> None:
    assert main(["run", "--config", str(CONFIGS / f"{name}.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "simple_mm_workflow" in out and "image_key: images" in out


def test_an_unreadable_image_fails_the_dry_run_naming_row_and_key(env: Path, capsys) -> None:
    rows = (env / "train.jsonl").read_text()
    missing = {"problem": "?", "answer": "1", "images": ["/no/such/picture.png"]}
    (env / "train.jsonl").write_text(rows + json.dumps(missing) + "\n")
    assert main(["run", "--config", str(CONFIGS / "grpo_vlm.yaml"), "--dry-run"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "buffer.explorer_input.tasksets[0].format.image_key: row 1 of" in err[0]
    assert "key 'images' (format.image_key)" in err[0] and "does not exist" in err[0]


def test_images_with_a_text_model_fail_the_dry_run(
    env: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(tiny_model_dir))
    assert main(["run", "--config", str(CONFIGS / "grpo_vlm.yaml"), "--dry-run"]) != 0
    err = capsys.readouterr().err
    assert "buffer.explorer_input.tasksets[0].format.image_key: rows with images need a " in err
    assert f"'{tiny_model_dir}' is a text model" in err


def test_images_on_dpo_rows_fail_the_dry_run(
    tiny_idefics3_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    dpo = CONFIGS.parents[3] / "examples" / "dpo" / "dpo.yaml"
    monkeypatch.chdir(CONFIGS.parents[3])
    args = [
        f"model.model_path={tiny_idefics3_dir}",
        f"checkpoint_root_dir={tmp_path}",
        "buffer.trainer_input.experience_buffer.format.image_key=images",
    ]
    assert main(["run", "--config", str(dpo), "--dry-run", *args]) != 0
    err = capsys.readouterr().err
    assert "buffer.trainer_input.experience_buffer.format.image_key: images are read by SFT " in err
