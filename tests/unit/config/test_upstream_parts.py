"""Arguments Trinity-RFT's parts take that ours compute otherwise: accepted, reported.

``mix`` and ``mix_chord`` upstream take the batch geometry (``ngpus_trainer``,
``ppo_mini_batch_size``, ...) to weight each micro-batch; here the trainer's normalizers
give the same averages, so the arguments are checked, listed in ``NO_EFFECT_ARGS`` and
reported by ``set_without_effect``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from config_testing import minimal_config

from trinity.algorithm.args import InvalidArgsError, build_args
from trinity.algorithm.registries import POLICY_LOSS_FN
from trinity.config import config_from_dict, resolve, validate
from trinity.config.no_effect import NO_EFFECT_ARGS, set_without_effect

# as upstream's mix_math example writes them
UPSTREAM_MIX_ARGS = {
    "mu": 0.1,
    "clip_range": 0.2,
    "sft_loss_agg_mode": "token-mean",
    "use_dynamic_bsz": True,
    "ppo_mini_batch_size": 320,
    "ppo_micro_batch_size_per_gpu": 4,
    "ngpus_trainer": 4,
    "train_batch_size_expert": 64,
    "train_batch_size_usual": 256,
}
GEOMETRY = [k for k in UPSTREAM_MIX_ARGS if k not in ("mu", "clip_range", "sft_loss_agg_mode")]


def _mix_config(tmp_path: Path, algorithm: dict[str, Any]) -> Any:
    data = minimal_config(tmp_path)
    data["algorithm"].update(algorithm)
    data["buffer"]["trainer_input"]["auxiliary_buffers"] = {"sft": {"path": "/data/sft"}}
    return config_from_dict(data)


def test_upstream_mix_args_load_and_are_reported_as_derived(tmp_path: Path) -> None:
    algorithm = {"algorithm_type": "mix", "policy_loss_fn_args": UPSTREAM_MIX_ARGS}
    validate(resolve(_mix_config(tmp_path, algorithm), now=datetime(2024, 1, 1)))
    found = dict(set_without_effect(_mix_config(tmp_path, algorithm)))
    # mu, clip_range and sft_loss_agg_mode act; the geometry is reported, nothing else
    assert sorted(found) == sorted(f"algorithm.policy_loss_fn_args.{k}" for k in GEOMETRY)
    assert "derived here" in found["algorithm.policy_loss_fn_args.ngpus_trainer"]


def test_a_stage_naming_mix_chord_reports_under_its_stage(tmp_path: Path) -> None:
    stage_algorithm = {
        "algorithm_type": "mix_chord",
        "policy_loss_fn_args": {"mu_peak": 0.5, "ngpus_trainer": 2},
    }
    data = minimal_config(tmp_path)
    data["stages"] = [{"stage_name": "chord", "algorithm": stage_algorithm}]
    found = [key for key, _ in set_without_effect(config_from_dict(data))]
    assert found == ["stages[0].algorithm.policy_loss_fn_args.ngpus_trainer"]


def test_other_losses_do_not_report_the_names(tmp_path: Path) -> None:
    data = minimal_config(tmp_path)
    data["algorithm"]["policy_loss_fn_args"] = {"clip_range": 0.3}
    assert set_without_effect(config_from_dict(data)) == []


@pytest.mark.parametrize("loss", sorted(NO_EFFECT_ARGS))
def test_listed_arguments_are_arguments_of_the_loss(loss: str) -> None:
    fields = {f.name for f in dataclasses.fields(POLICY_LOSS_FN.get(loss).Args)}
    assert set(NO_EFFECT_ARGS[loss]) <= fields


@pytest.mark.parametrize("loss", ["mix", "mix_chord"])
def test_each_part_falls_back_to_loss_agg_mode(loss: str) -> None:
    args_cls = POLICY_LOSS_FN.get(loss).Args
    both = build_args(args_cls, {"loss_agg_mode": "seq-mean-token-mean"}, loss)
    assert (both.loss_agg_mode, both.sft_loss_agg_mode) == ("seq-mean-token-mean",) * 2
    split = build_args(
        args_cls,
        {"loss_agg_mode": "token-mean", "grpo_loss_agg_mode": "seq-mean-token-sum"},
        loss,
    )
    # the rollout rows take grpo_loss_agg_mode, the expert rows loss_agg_mode
    assert (split.loss_agg_mode, split.sft_loss_agg_mode) == ("seq-mean-token-sum", "token-mean")
    with pytest.raises(InvalidArgsError, match="ngpus_trainer must be >= 1"):
        build_args(args_cls, {"ngpus_trainer": 0}, loss)
