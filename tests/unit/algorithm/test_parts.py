"""Building parts from config args, the algorithm types, and the sample strategies."""

import pytest
import torch

from trinity.algorithm import (
    ADVANTAGE_FN,
    ALGORITHM_TYPE,
    ENTROPY_LOSS_FN,
    KL_FN,
    POLICY_LOSS_FN,
    SAMPLE_STRATEGY,
    InvalidArgsError,
    build,
)
from trinity.types import Experience


def test_registries_hold_the_config_names():
    assert ADVANTAGE_FN.names() == [
        "asymre",
        "asymre_verl",
        "clipb",
        "clipv",
        "gigpo",
        "grpo",
        "grpo_verl",
        "jsd",
        "on_policy_distill",
        "opmd",
        "opmd_verl",
        "ppo",
        "rec",
        "reinforce",
        "reinforceplusplus",
        "remax",
        "rloo",
        "step_wise_grpo",
    ]
    assert POLICY_LOSS_FN.names() == [
        "cispo",
        "dpo",
        "gspo",
        "importance_sampling",
        "m2po",
        "mix",
        "mix_chord",
        "opmd",
        "ppo",
        "rec",
        "sapo",
        "sft",
        "sft_is",
        "sft_phi",
        "sppo",
        "topr",
    ]
    assert KL_FN.names() == ["abs", "corrected_k3", "k1", "k2", "k3", "low_var_kl", "none"]
    assert ENTROPY_LOSS_FN.names() == ["default", "mix", "none"]
    assert SAMPLE_STRATEGY.names() == [
        "default",
        "mix",
        "staleness_control",
        "staleness_limit",
        "warmup",
    ]


def test_unknown_arg_names_the_valid_ones():
    with pytest.raises(InvalidArgsError, match="'clip_rnage'.*clip_range, clip_range_low"):
        build(POLICY_LOSS_FN, "ppo", {"clip_rnage": 0.2})


def test_mistyped_and_out_of_range_args():
    with pytest.raises(InvalidArgsError, match="std_normalize.*bool"):
        build(ADVANTAGE_FN, "grpo", {"std_normalize": "yes"})
    with pytest.raises(InvalidArgsError, match="valid: token-mean"):
        build(POLICY_LOSS_FN, "ppo", {"loss_agg_mode": "mean"})
    with pytest.raises(InvalidArgsError, match="clip_ratio_c must be > 1"):
        build(POLICY_LOSS_FN, "ppo", {"clip_ratio_c": 0.5})


def test_args_defaults_and_yaml_ints():
    ppo = build(POLICY_LOSS_FN, "ppo", {"clip_range": 1})  # YAML writes 1 for 1.0
    assert (ppo.args.clip_range_low, ppo.args.clip_range_high) == (1.0, 1.0)
    gspo = build(POLICY_LOSS_FN, "gspo")
    assert (gspo.args.clip_range_low, gspo.args.clip_range_high) == (3e-4, 4e-4)
    assert build(KL_FN, "low_var_kl", {"kl_coef": 0.001}).args.kl_coef == 0.001


def test_every_algorithm_type_names_registered_parts():
    # the 25 algorithm types of Trinity-RFT 0.6, by its names
    assert ALGORITHM_TYPE.names() == [
        "asymre",
        "cispo",
        "cpt",
        "dapo",
        "dpo",
        "gigpo",
        "grpo",
        "grpo_verl",
        "gspo",
        "jsd",
        "m2po",
        "mix",
        "mix_chord",
        "multi_step_grpo",
        "on_policy_distill",
        "opmd",
        "ppo",
        "raft",
        "rec",
        "reinforceplusplus",
        "rloo",
        "sapo",
        "sft",
        "sppo",
        "topr",
    ]
    for name in ALGORITHM_TYPE.names():
        spec = ALGORITHM_TYPE.get(name)
        assert spec.policy_loss_fn in POLICY_LOSS_FN
        assert spec.advantage_fn == "none" or spec.advantage_fn in ADVANTAGE_FN
        assert spec.kl_loss_fn in KL_FN and spec.kl_penalty_fn in KL_FN
        assert spec.entropy_loss_fn in ENTROPY_LOSS_FN
        assert spec.sample_strategy in SAMPLE_STRATEGY
    assert ALGORITHM_TYPE.get("ppo").use_critic
    assert ALGORITHM_TYPE.get("dpo").fixed_repeat_times == 2


def experience(version: int) -> Experience:
    return Experience(tokens=torch.arange(4), prompt_length=2, info={"model_version": version})


def test_default_sample_strategy_keeps_the_first():
    exps = [experience(v) for v in (0, 1, 2)]
    assert build(SAMPLE_STRATEGY, "default").select(exps, 2) == exps[:2]


def test_staleness_limit_drops_old_experiences():
    exps = [experience(v) for v in (3, 1, 4, 2, 5)]
    strategy = build(SAMPLE_STRATEGY, "staleness_limit", {"max_staleness": 2})
    # current version 5: versions below 5 - 2 = 3 (1 and 2) are dropped
    kept = strategy.select(exps, 10, model_version=5)
    assert [e.model_version for e in kept] == [3, 4, 5]
    assert len(strategy.select(exps, 2, model_version=5)) == 2
    with pytest.raises(ValueError, match="model_version"):
        strategy.select(exps, 2)
