"""dry_run_report: the resolved config and the batch and resource arithmetic."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from trinity.config import config_from_dict, dry_run_report, load_config, resolve

EXAMPLES = Path(__file__).parent / "examples"
NOW = datetime(2024, 5, 6, 7, 8, 9)


def test_quick_start_on_its_two_gpus(env: dict[str, str]) -> None:
    report = dry_run_report(load_config(EXAMPLES / "gsm8k.yaml", now=NOW))
    lines = report.splitlines()
    resolved_yaml = report.split("# Batch arithmetic")[0].removeprefix("# Resolved configuration")
    assert yaml.safe_load(resolved_yaml)["buffer"]["train_batch_size"] == 1024
    assert "experiences per explore step: 128 x 8 = 1024" in lines
    # 2 GPUs - 1 rollout engine = 1 trainer rank; 1024 experiences / micro-batch 4 = 256
    assert "trainer ranks: 1; experiences per rank per train step: 1024" in lines
    assert "micro-batch size per rank: 4; micro-batches per rank per train step: 256" in lines
    assert "gradient accumulation steps per optimizer step: 256" in lines
    assert any(line.startswith("total train steps: unknown") for line in lines)
    assert "trainer: 1 GPU(s) (the rest)" in lines


def test_ppo_example_gpu_split(env: dict[str, str]) -> None:
    report = dry_run_report(load_config(EXAMPLES / "ppo_example.yaml", now=NOW))
    lines = report.splitlines()
    # 8 GPUs - 2 rollout engines - 2 reward-model engines = 4 trainer ranks; 256 / 4 = 64 each;
    # micro-batch 16 -> 4 micro-batches
    assert "trainer: 4 GPU(s) (the rest)" in lines
    assert "trainer ranks: 4; experiences per rank per train step: 64" in lines
    assert "micro-batch size per rank: 16; micro-batches per rank per train step: 4" in lines


def test_same_config_on_a_cpu_machine(env: dict[str, str]) -> None:
    report = dry_run_report(
        load_config(EXAMPLES / "ppo_example.yaml", now=NOW), gpus_available=0, cpus=2
    )
    assert (
        "no GPU: everything runs on CPU (cluster.gpu_per_node is 8 but this machine has none)"
        in report
    )
    # the report states the launcher's actual Ray requests and thread use
    assert "Ray CPU requests: explorer 0.5" in report
    assert "uses all 2 core(s) of its node" in report


def test_known_total_steps_and_dynamic_batches(minimal: dict[str, Any]) -> None:
    minimal["buffer"]["total_steps"] = 5
    minimal["trainer"] = {"use_dynamic_bsz": True, "max_token_len_per_gpu": 192}
    report = dry_run_report(resolve(config_from_dict(minimal), now=NOW), cpus=2)
    assert "total train steps: 5" in report
    # 8 experiences on one rank; 192 tokens hold 2 sequences of max_model_len 96 -> at most 4 micro-batches
    assert "at most 4 if every sequence is max_model_len (96) long" in report
    assert "trainer rank 0.5 each" in report


def test_bench_mode_lists_what_is_evaluated(minimal: dict[str, Any]) -> None:
    minimal["mode"] = "bench"
    minimal["buffer"]["explorer_input"]["eval_tasksets"] = [
        {"name": "eval", "path": "/data/eval", "repeat_times": 4}
    ]
    report = dry_run_report(resolve(config_from_dict(minimal), now=NOW), cpus=2)
    assert "eval taskset eval: 4 rollout(s) per task" in report
    assert "tasks per explore step" not in report and "trainer processes" not in report


def test_micro_batch_never_exceeds_the_rank_share(minimal: dict[str, Any]) -> None:
    minimal["buffer"]["train_batch_size"] = 2  # below the default micro-batch of 4
    report = dry_run_report(resolve(config_from_dict(minimal), now=NOW), cpus=2)
    assert "micro-batch size per rank: 2; micro-batches per rank per train step: 1" in report
