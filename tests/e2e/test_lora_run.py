"""End to end: a LoRA run through ``trinity run`` (memory sync), resumed once, then
``trinity convert``.

The demo config on the tiny model with a rank-4 adapter and the share of distinct
characters as the reward (the tiny random model never answers an addition right, so the
demo's reward would give no gradient): 2 steps, then the same run continued to step 3, so the explorer resumes from the adapter-only checkpoint of step 2
(merged into its base weights) and explores step 3 with policy version 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_testing import DEMO, run_cli
from test_resume import REWARD_PLUGIN
from transformers import AutoModelForCausalLM

from trinity.cli.main import main
from trinity.trainer import lora

ARGS = (
    "name=lora",
    "continue_from_checkpoint=true",
    "model.lora_configs=[{lora_rank: 4, lora_alpha: 16}]",
    "algorithm.optimizer.lr=1e-2",
    "synchronizer.sync_method=memory",
    "explorer.eval_on_startup=false",
    "explorer.runner_per_model=8",
    "buffer.explorer_input.eval_tasksets=[]",
    "buffer.trainer_input.experience_buffer.path=null",
    "buffer.explorer_input.default_reward_fn_type=char_variety_reward",
)


def explorer_versions(job: Path) -> dict[int, float]:
    rows = (job / "monitor" / "lora_explorer_metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["rollout/model_version"] for r in map(json.loads, rows)}


@pytest.mark.slow
def test_lora_run_syncs_resumes_and_converts(tiny_model_dir: Path, tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "char_variety_reward.py").write_text(REWARD_PLUGIN)
    common = ("run", "--config", str(DEMO), "--plugin-dir", str(plugins))
    common += (f"model.model_path={tiny_model_dir}",)
    common += (f"checkpoint_root_dir={tmp_path}", *ARGS)
    result = run_cli(*common, "buffer.total_steps=2")
    assert result.returncode == 0, result.stderr[-4000:]
    job = tmp_path / "trinity-demo" / "lora"

    # the checkpoint holds the adapter only (and the adapter in peft's format)
    actor = job / "global_step_2" / "actor"
    saved = torch.load(actor / "model_world_size_1_rank_0.pt", weights_only=True)
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved), sorted(saved)[:5]
    assert any(".lora_B." in k and float(v.abs().max()) > 0 for k, v in saved.items())
    assert (actor / lora.ADAPTER_DIR / "adapter_config.json").exists()

    # the explorer took each trained adapter: step 2 ran on version 1, then version 2 came
    assert explorer_versions(job) == {1: 0.0, 2: 1.0}
    log = (job / "log" / "explorer.log").read_text()
    assert "synchronized to policy version 1" in log
    assert "synchronized to policy version 2" in log

    # continued: the explorer loads the step-2 adapter from the checkpoint, merged
    result = run_cli(*common, "buffer.total_steps=3")
    assert result.returncode == 0, result.stderr[-4000:]
    assert "resumed the explorer after step 2" in (job / "log" / "explorer.log").read_text()
    assert explorer_versions(job)[3] == 2.0

    # the CLI's entry point in this process (test_convert runs the installed command)
    assert main(["convert", "--checkpoint-dir", str(job)]) == 0
    merged_dir = job / "global_step_3" / "actor" / "huggingface"
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).state_dict()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    assert merged.keys() == base.keys()
    moved = [k for k in base if not torch.equal(merged[k], base[k])]
    # only the adapted projections moved
    assert moved and all(k.endswith("_proj.weight") for k in moved), moved
