"""End to end: ``trinity run`` of the vision-language example (examples/vlm/grpo.yaml) on
a tiny random Qwen2.5-VL, two GRPO steps on the generated red-squares taskset.

The tiny model never counts right, so the exact-count reward would give no gradient: a
plugin reward (the share of distinct characters) replaces it. The example freezes the
vision tower: after two steps the language side has moved and the vision side has not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_testing import REPO, run_cli
from test_resume import REWARD_PLUGIN
from transformers import AutoModelForImageTextToText

from trinity.rollout.multimodal import is_vision_language, load_processor

EXAMPLE = REPO / "examples" / "vlm"


@pytest.mark.slow
def test_vlm_example_trains_two_steps(tiny_qwen_vl_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    subprocess.run([sys.executable, str(EXAMPLE / "make_data.py"), str(data)], check=True)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "char_variety_reward.py").write_text(REWARD_PLUGIN)
    result = run_cli(
        "run",
        "--config",
        str(EXAMPLE / "grpo.yaml"),
        "--plugin-dir",
        str(plugins),
        f"model.model_path={tiny_qwen_vl_dir}",
        f"checkpoint_root_dir={tmp_path}",
        f"buffer.explorer_input.taskset.path={data}",
        "buffer.explorer_input.eval_tasksets=[]",
        "buffer.explorer_input.default_reward_fn_type=char_variety_reward",
        "buffer.total_steps=2",
        "model.max_response_tokens=8",
        "model.dtype=float32",
        "algorithm.optimizer.lr=1e-2",
        "explorer.eval_on_startup=false",
        "name=vlm",
        "continue_from_checkpoint=true",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    job = tmp_path / "trinity-demo" / "vlm"
    rows = (job / "monitor" / "vlm_trainer_metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(r) for r in rows]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["actor/grad_norm"] > 0 for m in metrics)

    trained = torch.load(
        job / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt", weights_only=True
    )
    base = AutoModelForImageTextToText.from_pretrained(tiny_qwen_vl_dir).state_dict()
    moved = {k for k, v in base.items() if k in trained and not torch.equal(trained[k], v)}
    assert any(".language_model." in k for k in moved), sorted(moved)[:5]
    # freeze_vision_tower: true in the example
    assert not [k for k in moved if ".visual." in k]
    # the exported policy loads as the vision-language model it came from
    exported = job / "global_step_2" / "actor" / "huggingface"
    assert (exported / "processor_config.json").is_file()
    assert is_vision_language(exported) and load_processor(exported).image_processor
