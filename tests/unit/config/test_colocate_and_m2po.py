"""Two Trinity-RFT keys: ``mode: colocate`` (explorer and trainer on one GPU, run as mode
both) and ``algorithm.bypass_old_logprobs`` with the m2po type that needs it."""

from __future__ import annotations

from typing import Any

import pytest
from config_testing import resolved_config

from trinity.config import ConfigError, dry_run_report
from trinity.config.device_plan import device_plan

# built as a file is (Trinity-RFT's spellings first), resolved and validated
loaded = resolved_config


# ---------------------------------------------------------------- m2po


def test_m2po_needs_the_rollout_logprobs_as_old_logprobs(minimal: dict[str, Any]) -> None:
    minimal["algorithm"] = {"algorithm_type": "m2po", "repeat_times": 4}
    cfg = resolved_config(minimal)
    assert cfg.algorithm.bypass_old_logprobs is True
    assert (cfg.algorithm.policy_loss_fn, cfg.algorithm.use_reference) == ("m2po", False)
    minimal["algorithm"]["bypass_old_logprobs"] = False
    with pytest.raises(
        ConfigError, match=r"^algorithm\.bypass_old_logprobs: .*m2po.*\(given: False\); true$"
    ):
        resolved_config(minimal)
    del minimal["algorithm"]["bypass_old_logprobs"]
    minimal["trainer"] = {
        "trainer_config": {"algorithm": {"rollout_correction": {"bypass_mode": False}}}
    }
    with pytest.raises(ConfigError, match=r"rollout_correction\.bypass_mode: .*m2po"):
        resolved_config(minimal)


def test_bypass_old_logprobs_false_counts_as_recomputing_for_rollout_is(
    minimal: dict[str, Any],
) -> None:
    minimal["algorithm"]["bypass_old_logprobs"] = False
    minimal["trainer"] = {
        "trainer_config": {"algorithm": {"rollout_correction": {"rollout_is": "token"}}}
    }
    assert resolved_config(minimal).algorithm.bypass_old_logprobs is False


# ---------------------------------------------------------------- mode colocate


def test_mode_colocate_runs_as_both_on_one_gpu(minimal: dict[str, Any]) -> None:
    minimal["mode"] = "colocate"
    cfg = loaded(minimal)
    assert (cfg.mode, cfg.cluster.colocate, cfg.cluster.gpu_per_node) == ("both", True, 1)
    assert device_plan(cfg).kind == "colocate"
    report = dry_run_report(cfg, cpus=2)
    assert (
        "mode colocate: the explorer and the trainer share GPU 0; the rollout engine frees "
        "its KV cache while the trainer steps and takes it again before its rollouts"
    ) in report
    # this machine has no GPU: the run is mode both on CPU, and one line says so
    cpu = dry_run_report(cfg, gpus_available=0, cpus=2)
    assert "mode colocate: no GPU, so the run is mode both on CPU" in cpu


def test_mode_colocate_refuses_more_than_one_gpu(minimal: dict[str, Any]) -> None:
    minimal["mode"] = "colocate"
    minimal["cluster"] = {"gpu_per_node": 2}
    with pytest.raises(ConfigError, match=r"^cluster\.gpu_per_node: mode colocate .*\(given: 2\)"):
        loaded(minimal)
    minimal["cluster"] = {"gpu_per_node": 0}  # a CPU config stays on CPU
    assert loaded(minimal).cluster.gpu_per_node == 0


def test_a_stage_runs_colocate_only_in_a_colocated_run(minimal: dict[str, Any]) -> None:
    minimal["stages"] = [{"stage_name": "a", "mode": "colocate"}]
    with pytest.raises(ConfigError, match=r"^stages\[0\]\.mode: .*top level"):
        loaded(minimal)
    minimal["mode"] = "colocate"
    cfg = loaded(minimal)
    assert cfg.stages[0].mode == "both" and cfg.cluster.colocate
