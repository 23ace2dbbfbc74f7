"""Which ``Args`` each built-in part takes, by the part's registered name.

Config validation checks a built-in part's ``*_args`` against this table without
importing ``trinity.algorithm`` (and torch); a test checks the table against the
registries, part by part. Every built-in part declares an ``Args``: a part of no
arguments has an empty one.
"""

from __future__ import annotations

from trinity.config.part_args import advantage, entropy, kl, policy_loss, sample_strategy

# kind (the registry's name) -> registered name -> the part's Args
BUILTIN_PART_ARGS: dict[str, dict[str, type]] = {
    "advantage_fn": {
        "asymre": advantage.AsymREArgs,
        "asymre_verl": advantage.AsymREArgs,
        "clipb": advantage.ClipBAdvantageArgs,
        "clipv": advantage.ClipVAdvantageArgs,
        "gigpo": advantage.GiGPOAdvantageArgs,
        "grpo": advantage.GRPOAdvantageArgs,
        "grpo_verl": advantage.GRPOVerlAdvantageArgs,
        "jsd": advantage.JSDAdvantageArgs,
        "on_policy_distill": advantage.OnPolicyDistillAdvantageArgs,
        "opmd": advantage.OPMDArgs,
        "opmd_verl": advantage.OPMDArgs,
        "ppo": advantage.PPOAdvantageArgs,
        "rec": advantage.RECAdvantageArgs,
        "reinforce": advantage.ReinforceAdvantageArgs,
        "reinforceplusplus": advantage.ReinforcePlusPlusAdvantageArgs,
        "remax": advantage.ReMaxAdvantageArgs,
        "rloo": advantage.RLOOAdvantageArgs,
        "step_wise_grpo": advantage.StepWiseGRPOAdvantageArgs,
    },
    "policy_loss_fn": {
        "cispo": policy_loss.CISPOPolicyLossArgs,
        "dpo": policy_loss.DPOLossArgs,
        "gspo": policy_loss.GSPOPolicyLossArgs,
        "importance_sampling": policy_loss.LossAggModeArgs,
        "m2po": policy_loss.M2POPolicyLossArgs,
        "mix": policy_loss.MixPolicyLossArgs,
        "mix_chord": policy_loss.MixCHORDPolicyLossArgs,
        "opmd": policy_loss.OPMDPolicyLossArgs,
        "ppo": policy_loss.PPOPolicyLossArgs,
        "rec": policy_loss.RECPolicyLossArgs,
        "sapo": policy_loss.SAPOPolicyLossArgs,
        "sft": policy_loss.LossAggModeArgs,
        "sft_is": policy_loss.LossAggModeArgs,
        "sft_phi": policy_loss.SFTPhiLossArgs,
        "sppo": policy_loss.SPPOPolicyLossArgs,
        "topr": policy_loss.TOPRPolicyLossArgs,
    },
    # one Args for every estimator, "none" included
    "kl_fn": dict.fromkeys(
        ("none", "k1", "k2", "k3", "low_var_kl", "abs", "corrected_k3"), kl.KLFnArgs
    ),
    "entropy_loss_fn": {
        "default": entropy.EntropyLossArgs,
        "mix": entropy.EntropyLossArgs,
        "none": entropy.NoEntropyLossArgs,
    },
    "sample_strategy": {
        "default": sample_strategy.DefaultSampleStrategyArgs,
        "mix": sample_strategy.MixSampleStrategyArgs,
        "staleness_control": sample_strategy.StalenessControlSampleStrategyArgs,
        "staleness_limit": sample_strategy.StalenessLimitSampleStrategyArgs,
        "warmup": sample_strategy.DefaultSampleStrategyArgs,
    },
}
