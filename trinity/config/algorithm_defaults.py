"""What each ``algorithm.algorithm_type`` means: its default parts and its requirements.

``resolve`` fills every part the user left unset from this table; a part set in the
config always wins. ``"none"`` as a part name means the part is switched off. This table
is the one source of the algorithm types: ``trinity.algorithm.ALGORITHM_TYPE`` registers
its records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trinity.config.errors import ConfigError, closest
from trinity.config.part_args.builtin import BUILTIN_PART_ARGS

if TYPE_CHECKING:
    from trinity.config.schema import Config

NONE = "none"


@dataclass(frozen=True)
class AlgorithmType:
    """Default parts and requirements of one algorithm type."""

    advantage_fn: str
    policy_loss_fn: str
    kl_penalty_fn: str
    kl_loss_fn: str
    entropy_loss_fn: str
    sample_strategy: str
    use_critic: bool  # trains a value model (GAE advantages)
    needs_reference: bool  # needs the reference model even without a KL part (dpo)
    needs_group: bool  # compares rollouts of the same task, so repeat_times must be > 1
    fixed_repeat_times: int | None = None  # dpo: one chosen and one rejected response
    use_rollout: bool = True  # False: trains on a dataset (mode train), no explorer
    # arguments of the row's own policy loss, used when the config gives none (dapo's clip)
    policy_loss_fn_args: dict[str, Any] = field(default_factory=dict)
    dynamic_sampling: bool = False  # algorithm.dynamic_sampling.enable when unset (dapo)
    best_of_group: bool = False  # train only on each group's best-rewarded rollouts (raft)


ALGORITHM_DEFAULTS: dict[str, AlgorithmType] = {
    "sft": AlgorithmType(
        NONE, "sft", NONE, NONE, NONE, "default", False, False, False, use_rollout=False
    ),
    "ppo": AlgorithmType("ppo", "ppo", NONE, "k2", "default", "default", True, False, False),
    "grpo": AlgorithmType("grpo", "ppo", NONE, "k2", "default", "default", False, False, True),
    "opmd": AlgorithmType("opmd", "opmd", NONE, "k2", "default", "default", False, False, True),
    "dpo": AlgorithmType(
        NONE, "dpo", NONE, NONE, NONE, "default", False, True, False, 2, use_rollout=False
    ),
    "mix": AlgorithmType("grpo", "mix", NONE, "k2", "default", "mix", False, False, True),
    "rloo": AlgorithmType("rloo", "ppo", NONE, "k2", "default", "default", False, False, True),
    "reinforceplusplus": AlgorithmType(
        "reinforceplusplus", "ppo", NONE, "k2", "default", "default", False, False, False
    ),
    "gspo": AlgorithmType("grpo", "gspo", NONE, NONE, "default", "default", False, False, True),
    # -- types composed of existing parts --
    "cpt": AlgorithmType(
        NONE, "sft", NONE, NONE, NONE, "default", False, False, False, use_rollout=False
    ),
    "asymre": AlgorithmType("asymre", "opmd", NONE, NONE, NONE, "default", False, False, True),
    "topr": AlgorithmType(
        "reinforce", "topr", NONE, "k2", "default", "default", False, False, False
    ),
    "cispo": AlgorithmType("grpo", "cispo", NONE, "k2", "default", "default", False, False, True),
    "sapo": AlgorithmType("grpo", "sapo", NONE, "k2", "default", "default", False, False, True),
    # M2PO trains on stale rollouts: no KL, no entropy term, no reference model
    "m2po": AlgorithmType("grpo", "m2po", NONE, NONE, NONE, "default", False, False, True),
    "mix_chord": AlgorithmType("grpo", "mix_chord", NONE, "k2", "mix", "mix", False, False, True),
    "sppo": AlgorithmType("opmd", "sppo", NONE, NONE, NONE, "default", False, False, True),
    "rec": AlgorithmType("rec", "rec", NONE, "k2", "default", "default", False, False, True),
    "grpo_verl": AlgorithmType(
        "grpo_verl", "ppo", NONE, "k2", "default", "default", False, False, True
    ),
    # -- on-policy distillation (a teacher among explorer.auxiliary_models) --
    "on_policy_distill": AlgorithmType(
        "on_policy_distill", "ppo", NONE, NONE, NONE, "default", False, False, False
    ),
    "jsd": AlgorithmType("jsd", "ppo", NONE, NONE, NONE, "default", False, False, False),
    # -- DAPO, multi-step and filtering types --
    "dapo": AlgorithmType(
        *("grpo", "ppo", NONE, NONE, "default", "default", False, False, True),
        policy_loss_fn_args={"clip_range_low": 0.2, "clip_range_high": 0.28, "clip_ratio_c": None},
        dynamic_sampling=True,
    ),
    "multi_step_grpo": AlgorithmType(
        "step_wise_grpo", "ppo", NONE, "k2", "default", "default", False, False, True
    ),
    "gigpo": AlgorithmType("gigpo", "ppo", NONE, "k2", "default", "default", False, False, True),
    # RAFT keeps each group's best rollouts; a group of one keeps it when it scored > 0
    "raft": AlgorithmType(
        NONE, "sft", NONE, NONE, NONE, "default", False, False, False, best_of_group=True
    ),
}

PART_NAMES = (
    "advantage_fn",
    "policy_loss_fn",
    "kl_penalty_fn",
    "kl_loss_fn",
    "entropy_loss_fn",
    "sample_strategy",
)


# The parts trinity.algorithm registers, by the names the config uses (a test checks the
# table against the registries). Config validation reads it to accept a built-in name
# without importing the algorithm package, and with it torch, in the driver.
BUILTIN_PART_NAMES: dict[str, frozenset[str]] = {
    kind: frozenset(parts) for kind, parts in BUILTIN_PART_ARGS.items()
}
# the registry (kind) each part name of the config is looked up in
PART_KINDS = {
    "advantage_fn": "advantage_fn",
    "policy_loss_fn": "policy_loss_fn",
    "kl_penalty_fn": "kl_fn",
    "kl_loss_fn": "kl_fn",
    "entropy_loss_fn": "entropy_loss_fn",
    "sample_strategy": "sample_strategy",
}


def defaults_for(algorithm_type: str) -> AlgorithmType:
    """The table row of ``algorithm_type``; ConfigError naming the known types otherwise."""
    try:
        return ALGORITHM_DEFAULTS[algorithm_type]
    except KeyError:
        raise ConfigError(
            "algorithm.algorithm_type",
            "unknown algorithm type",
            value=algorithm_type,
            valid="valid: " + ", ".join(ALGORITHM_DEFAULTS),
            suggestion=closest(algorithm_type, ALGORITHM_DEFAULTS),
        ) from None


def trains_on_dataset(config: Config) -> bool:
    """True for the algorithm types that read a dataset instead of rollouts (sft, dpo)."""
    return not defaults_for(config.algorithm.algorithm_type).use_rollout
