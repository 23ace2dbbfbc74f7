"""The SFT -> GRPO stages example through ``trinity run``, on the tiny model.

Stage sft_warmup (mode train) exports its final weights as a Hugging Face directory;
stage rft (mode both) must start from exactly those weights. Two more stages follow in
the same run: explore (mode explore) writes experiences to an SQL buffer and train (mode
train) trains GRPO on them. Each stage runs as the experiment ``<name>/<stage_name>``
under ``<checkpoint_root_dir>/<project>/``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from cli_testing import REPO, run_cli
from safetensors.torch import load_file

EXAMPLE = REPO / "examples" / "sft_grpo" / "sft_grpo.yaml"


def trainer_rows(job: Path) -> list[dict]:
    # the file is named after the experiment, whose name holds a "/" for a stage
    [path] = (job / "monitor").rglob("*_trainer_metrics.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def staged_run(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory, shared_ray_head: str
) -> Path:
    """One ``trinity run`` of the example, shrunk to 2 quick steps a stage, with the
    explore and train stages appended, on the suite's shared Ray head (a module fixture
    runs before the tests' own ``RAY_ADDRESS``); the checkpoint root."""
    root = tmp_path_factory.mktemp("stages")
    config = yaml.safe_load(EXAMPLE.read_text())
    config.update(name="stages", continue_from_checkpoint=True, checkpoint_root_dir=str(root))
    config["model"].update(model_path=str(tiny_model_dir), max_response_tokens=8)
    # stage rft: 2 explore/train steps of 2 tasks x 2 rollouts, no evaluation
    config["buffer"]["total_steps"] = 2
    config["algorithm"]["repeat_times"] = 2
    config["buffer"]["explorer_input"]["eval_tasksets"] = []
    config["explorer"]["eval_on_startup"] = False
    # stage sft_warmup: 2 steps of 4 rows
    config["stages"][0]["buffer"].update(total_steps=2, train_batch_size=4)
    decoupled = {
        "trainer_input": {
            "experience_buffer": {
                "name": "decoupled_buffer",
                "storage_type": "sql",
                "path": f"sqlite:///{root}/experiences.db",
                "max_read_timeout": 5,
            }
        }
    }
    config["stages"] += [
        {"stage_name": "explore", "mode": "explore", "buffer": decoupled},
        {"stage_name": "train", "mode": "train", "buffer": decoupled},
    ]
    path = root / "stages.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_cli(
        "run", "--config", str(path), env={**os.environ, "RAY_ADDRESS": shared_ray_head}
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "[trinity] ray: joined" in result.stderr
    return root


@pytest.mark.slow
def test_sft_warmup_then_grpo(tiny_model_dir: Path, staged_run: Path) -> None:
    sft = staged_run / "trinity-examples" / "stages" / "sft_warmup"
    rft = staged_run / "trinity-examples" / "stages" / "rft"

    # stage 1 trained on the SFT data and exported its last step
    sft_rows = trainer_rows(sft)
    assert [r["step"] for r in sft_rows] == [1, 2]
    assert all("actor/sft_loss" in r for r in sft_rows)
    export = sft / "global_step_2" / "actor" / "huggingface"
    exported = load_file(export / "model.safetensors")
    final = torch.load(sft / "global_step_2/actor/model_world_size_1_rank_0.pt", weights_only=True)
    for key, value in exported.items():
        assert torch.equal(value, final[key]), key
    initial = load_file(tiny_model_dir / "model.safetensors")
    assert any(not torch.equal(v, exported[k]) for k, v in initial.items())

    # stage 2 started from that export
    rft_config = yaml.safe_load((rft / "config.yaml").read_text())
    assert rft_config["name"] == "stages/rft"
    assert rft_config["algorithm"]["algorithm_type"] == "grpo"
    assert Path(rft_config["model"]["model_path"]) == export
    assert Path(rft_config["explorer"]["rollout_model"]["model_path"]) == export
    rft_rows = trainer_rows(rft)
    assert [r["step"] for r in rft_rows] == [1, 2]
    # the first GRPO step's KL to the reference (the start weights) is 0: the trainer's
    # reference model is the export it was given
    assert rft_rows[0]["actor/kl_loss"] == 0.0
    assert (rft / "global_step_2/actor/model_world_size_1_rank_0.pt").exists()
    assert (rft / "log" / "explorer.log").exists() and not (sft / "log" / "explorer.log").exists()
    # stage 2 trained in the process of stage 1's trainer (trinity.launch.stage_actors)
    sft_pids, rft_pids = (
        json.loads((d / "placement.json").read_text())["pids"] for d in (sft, rft)
    )
    assert rft_pids["trainer_ranks"] == sft_pids["trainer_ranks"]
    assert "explorer" not in sft_pids and "explorer" in rft_pids


@pytest.mark.slow
def test_explore_stage_then_train_stage_on_its_experiences(staged_run: Path) -> None:
    """Mode explore writes experiences to a SQL buffer; mode train trains GRPO on them."""
    explore = staged_run / "trinity-examples" / "stages" / "explore"
    train = staged_run / "trinity-examples" / "stages" / "train"
    assert (explore / "log" / "explorer.log").exists()
    assert not (explore / "log" / "trainer.log").exists()
    assert not list(explore.glob("global_step_*"))  # nothing trained in mode explore

    from sqlalchemy import create_engine, text

    with create_engine(f"sqlite:///{staged_run}/experiences.db").connect() as conn:
        stored = conn.execute(text("SELECT COUNT(*) FROM experience")).scalar()
    assert stored == 2 * 2 * 2  # 2 steps x 2 tasks x 2 rollouts

    rows = trainer_rows(train)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["batch/size"] == 4 for r in rows)
    assert not (train / "log" / "explorer.log").exists()
    assert (train / "global_step_2/actor/model_world_size_1_rank_0.pt").exists()
